// nats.js, unmodified, with republish on a stream and on a KV bucket, against a running server.
//
//     node tests/js/republish_client.mjs nats://127.0.0.1:4222
//
// A stream republishing `jsr.>` to `seen.>`: a subscriber reads each committed message with
// its origin headers. A KV bucket with `republish` (headers only): a put is seen with its
// size and no body. Runs under harness.mjs; tests/e2e/test_republish_streams.py runs it against both
// servers.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { eq, ok, run, step, within } from "./harness.mjs";

async function next(sub, what) {
  const it = sub[Symbol.asyncIterator]();
  const got = await within(10_000, it.next(), () => `no republished message for ${what}`);
  return got.value;
}

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  ok("connect");

  step("stream republish");
  await jsm.streams.add({
    name: "JSR",
    subjects: ["jsr.>"],
    republish: { src: "jsr.>", dest: "seen.>" },
  });
  const sub = nc.subscribe("seen.>");
  await nc.flush();
  await js.publish("jsr.a", "one");
  const m = await next(sub, "jsr.a");
  eq(
    [m.subject, m.string(), m.headers.get("Nats-Stream"), m.headers.get("Nats-Subject")],
    ["seen.a", "one", "JSR", "jsr.a"],
    "republished message",
  );
  eq(
    [m.headers.get("Nats-Sequence"), m.headers.get("Nats-Last-Sequence")],
    ["1", "0"],
    "sequences",
  );
  ok("stream republish");

  step("kv republish");
  const kvm = new Kvm(nc);
  const kv = await kvm.create("JSKVR", {
    republish: { src: ">", dest: "kvseen.>", headers_only: true },
  });
  const kvsub = nc.subscribe("kvseen.>");
  await nc.flush();
  await kv.put("k1", "value");
  const km = await next(kvsub, "k1");
  eq(
    [km.subject, km.data.length, km.headers.get("Nats-Msg-Size"), km.headers.get("Nats-Stream")],
    ["kvseen.$KV.JSKVR.k1", 0, "5", "KV_JSKVR"],
    "kv republished headers only",
  );
  ok("kv republish");
  await nc.drain();
});
