// nats.js, unmodified, reads back what it published as nats-server gives it.
//
//     node tests/js/parity_client.mjs nats://127.0.0.1:4222
//
// A header with three values comes back with its values in order from a message get, a pull
// and an ordered consumer; a request with nulls is read as nats-server reads it; an ordered
// consumer's info keeps its mem_storage; a one-message stream holds nats-server's bytes; a
// subscriber on $JS.API.> sees the manager's requests. Runs under harness.mjs;
// tests/e2e/test_parity_js.py runs it against both servers.

import { connect, headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { eq, ok, run, step } from "./harness.mjs";

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  ok("connect");

  step("one message's bytes");
  await jsm.streams.add({ name: "PB", subjects: ["p.subject"] });
  await js.publish("p.subject", "hello");
  // nats-server's file store: 30 bytes of framing, the subject and the data.
  eq((await jsm.streams.info("PB")).state.bytes, 30 + 9 + 5, "bytes of one message");
  ok("one message's bytes");

  step("repeated header values");
  await jsm.streams.add({ name: "PH", subjects: ["ph.>"], allow_direct: false });
  const h = headers();
  for (const v of ["1", "2", "3"]) h.append("X", v);
  await js.publish("ph.a", "data", { headers: h });
  const got = await jsm.streams.getMessage("PH", { seq: 1 });
  eq(got.header.values("X"), ["1", "2", "3"], "message get");
  await jsm.consumers.add("PH", { durable_name: "PULL", ack_policy: "explicit" });
  const pull = await js.consumers.get("PH", "PULL");
  const fetched = await pull.next({ expires: 5000 });
  eq(fetched.headers.values("X"), ["1", "2", "3"], "pull");
  fetched.ack();
  const ordered = await js.consumers.get("PH");
  const next = await ordered.next({ expires: 5000 });
  eq(next.headers.values("X"), ["1", "2", "3"], "ordered consumer");
  ok("repeated header values");

  step("ordered consumer info");
  const info = await ordered.info(true);
  eq([info.config.mem_storage, info.config.num_replicas], [true, 1], "ordered config");
  ok("ordered consumer info");

  step("nulls");
  const sub = nc.subscribe("$JS.API.>");
  const body = '{"deleted_details":false,"subjects_filter":null,"offset":null}';
  const answer = (await nc.request("$JS.API.STREAM.INFO.PH", body)).json();
  eq([answer.error, answer.config.name, answer.state.messages], [undefined, "PH", 1], "info");
  const names = (await nc.request("$JS.API.STREAM.NAMES", '{"offset":0,"subject":null}')).json();
  eq(names.streams, ["PB", "PH"], "names");
  const msg = (
    await nc.request("$JS.API.STREAM.MSG.GET.PH", '{"seq":null,"last_by_subj":"ph.a"}')
  ).json();
  eq(msg.message.seq, 1, "message get by last subject");
  ok("nulls");

  step("API subscriber");
  const seen = [];
  for await (const m of sub) {
    seen.push(m.subject);
    if (seen.length === 3) break;
  }
  eq(
    seen,
    ["$JS.API.STREAM.INFO.PH", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.MSG.GET.PH"],
    "requests seen",
  );
  ok("API subscriber");
  await nc.drain();
});
