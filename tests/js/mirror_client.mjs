// nats.js, unmodified, with mirrors and sources of streams and of KV buckets, against a
// running server.
//
//     node tests/js/mirror_client.mjs nats://127.0.0.1:4222
//
// A stream mirror keeps its origin's sequences; a KV bucket made with `{ mirror }` holds the
// origin's keys; one made with `{ sources }` answers the keys of both its sources. Runs under
// harness.mjs; tests/e2e/test_mirror_js.py runs it against both servers.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { eq, ok, run, sleep, step } from "./harness.mjs";

async function until(jsm, stream, messages) {
  for (let i = 0; i < 600; i++) {
    const info = await jsm.streams.info(stream);
    if (info.state.messages >= messages) {
      return info;
    }
    await sleep(50);
  }
  throw new Error(`${stream} never held ${messages} messages`);
}

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  ok("connect");

  step("stream mirror");
  await jsm.streams.add({ name: "JSO", subjects: ["jso.>"] });
  for (let i = 1; i <= 5; i++) {
    await js.publish(`jso.${i}`, `m${i}`);
  }
  await jsm.streams.deleteMessage("JSO", 2);
  await jsm.streams.add({ name: "JSM", mirror: { name: "JSO" } });
  const info = await until(jsm, "JSM", 4);
  eq([info.state.first_seq, info.state.last_seq, info.mirror.name], [1, 5, "JSO"], "mirror state");
  const m5 = await jsm.streams.getMessage("JSM", { seq: 5 });
  eq([m5.subject, m5.string()], ["jso.5", "m5"], "mirrored message");
  ok("stream mirror");

  step("kv mirror");
  const kvm = new Kvm(nc);
  const conf = await kvm.create("JSCONF");
  await conf.put("a", "1");
  await conf.put("b", "2");
  await kvm.create("JSEDGE", { mirror: { name: "JSCONF" } });
  const edgeInfo = await until(jsm, "KV_JSEDGE", 2);
  eq([edgeInfo.config.mirror.name, edgeInfo.config.mirror_direct], ["KV_JSCONF", true], "kv mirror");
  // The mirror holds the origin bucket's keys (what a leaf's `kvm.open` of it reads).
  const a = await jsm.streams.getMessage("KV_JSEDGE", { last_by_subj: "$KV.JSCONF.a" });
  const b = await jsm.streams.getMessage("KV_JSEDGE", { last_by_subj: "$KV.JSCONF.b" });
  eq([a.string(), b.string()], ["1", "2"], "keys in the mirror");
  ok("kv mirror");

  step("kv sources");
  const other = await kvm.create("JSOTHER");
  await other.put("c", "3");
  const all = await kvm.create("JSALL", { sources: [{ name: "JSCONF" }, { name: "JSOTHER" }] });
  await until(jsm, "KV_JSALL", 3);
  eq((await all.get("a"))?.string(), "1", "a sourced");
  eq((await all.get("c"))?.string(), "3", "c sourced");
  ok("kv sources");

  await nc.close();
});
