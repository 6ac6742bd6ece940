// nats.js atomic batch publish (js.startBatch), unmodified, against a running server.
//
//     node tests/js/batch_client.mjs nats://127.0.0.1:4222
//
// A batch of three (the first answered, one added with an ack, one without), committed; then
// a batch with a wrong expectation, refused whole. Runs under harness.mjs;
// tests/e2e/test_atomic_batch.py runs it against both servers.

import { connect, headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { eq, ok, run, step } from "./harness.mjs";

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "JSB", subjects: ["jsb.>"], allow_atomic: true });
  const js = jetstream(nc);
  ok("connect");

  step("batch");
  const batch = await js.startBatch("jsb.a", "1");
  await batch.add("jsb.b", "2", { ack: true });
  batch.add("jsb.c", "3");
  const ack = await batch.commit("jsb.d", "4");
  eq([ack.stream, ack.seq, ack.count, ack.batch === batch.id], ["JSB", 4, 4, true], "batch ack");
  ok("committed batch");

  step("refused batch");
  const bad = await js.startBatch("jsb.e", "5");
  const h = headers();
  h.set("Nats-Expected-Last-Subject-Sequence", "99");
  let refused = null;
  try {
    await bad.commit("jsb.f", "6", { headers: h });
  } catch (err) {
    refused = err;
  }
  eq(refused !== null, true, "a batch with a wrong expectation was refused");
  const si = await jsm.streams.info("JSB");
  eq([si.state.messages, si.state.last_seq], [4, 4], "only the whole batch stored");
  ok("refused batch");
  await nc.drain();
});
