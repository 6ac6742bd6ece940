// nats.js, unmodified, on a counter stream (allow_msg_counter), against a running server.
//
//     node tests/js/counters_client.mjs nats://127.0.0.1:4222
//
// Increments with a Nats-Incr header, read back from the PubAck's `val` and the stored body;
// an increment with a body is refused. Runs under harness.mjs; tests/e2e/test_counters_streams.py runs
// it against both servers.

import { connect, headers } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { eq, ok, run, step } from "./harness.mjs";

async function incr(nc, subject, by, data = "") {
  const h = headers();
  h.set("Nats-Incr", by);
  const reply = await nc.request(subject, data, { headers: h, timeout: 10_000 });
  return reply.json();
}

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "JSC", subjects: ["jsc.>"], allow_msg_counter: true });
  ok("connect");

  step("increments");
  const big = "98765432109876543210987654321";
  const acks = [await incr(nc, "jsc.n", "+5"), await incr(nc, "jsc.n", big)];
  eq(
    acks.map((a) => [a.seq, a.val]),
    [
      [1, "5"],
      [2, (BigInt(big) + 5n).toString()],
    ],
    "PubAck values",
  );
  const last = await jsm.streams.getMessage("JSC", { last_by_subj: "jsc.n" });
  eq(last.json(), { val: (BigInt(big) + 5n).toString() }, "stored value");
  eq(last.header.get("Nats-Incr"), big, "Nats-Incr kept");
  ok("increments");

  step("refused");
  const refused = await incr(nc, "jsc.n", "+1", "body");
  eq(refused.error?.err_code, 10170, "an increment with a body");
  ok("refused");
  await nc.drain();
});
