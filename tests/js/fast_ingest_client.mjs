// nats.js fast-ingest batch publishing (startFastIngest, ADR-50), unmodified, against a
// running server.
//
//     node tests/js/fast_ingest_client.mjs nats://127.0.0.1:4222
//
// A batch of 100 flow-controlled messages committed with its last one, then a batch allowing
// gaps committed by an end-of-batch marker. Runs under harness.mjs;
// tests/e2e/test_fast_batch.py runs it against both servers.

import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
// nats.js 3.4 exports startFastIngest from its internal module only.
import { startFastIngest } from "@nats-io/jetstream/internal";
import { eq, ok, run, step } from "./harness.mjs";

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "FI", subjects: ["fi.>"], allow_batched: true });
  ok("connect");

  step("batch");
  const fi = await startFastIngest(nc, "fi.a", "0", { allowGaps: false, ackInterval: 10 });
  for (let i = 1; i < 99; i++) await fi.add("fi.a", `${i}`);
  const ack = await fi.last("fi.a", "99");
  eq([ack.stream, ack.seq, ack.count, ack.batch === fi.batch], ["FI", 100, 100, true], "ack");
  eq((await jsm.streams.info("FI")).state.messages, 100, "stored");
  ok("batch");

  step("end of batch");
  const gaps = await startFastIngest(nc, "fi.b", "x", { allowGaps: true });
  await gaps.add("fi.b", "y");
  const end = await gaps.end();
  eq([end.seq, end.count], [102, 2], "end-of-batch ack");
  ok("end of batch");
  await nc.close();
  return { count: ack.count };
});
