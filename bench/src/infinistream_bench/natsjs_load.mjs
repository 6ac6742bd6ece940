// nats.js (v3) as applications use it: one measurement of `infinistream bench`.
//
//     node natsjs_load.mjs MODULES_DIR SPEC_JSON
//
// MODULES_DIR is a node_modules directory holding @nats-io/transport-node and
// @nats-io/jetstream (the bench passes tests/js/node_modules, which scripts/test installs).
// SPEC_JSON: {"url", "mode", ...}; the modes:
//   publish        `await js.publish()` in a loop for warmup + duration s, each publish timed
//   publish_async  `js.publish()` with at most `window` promises unsettled, for warmup + duration s
//   fetch          `consumer.fetch({max_messages: batch})` until `messages` arrived, each acked
// Connected and set up, it prints "ready" and waits for a line on stdin before it starts; at
// the end it prints one line "RESULT <json>". Exits 1 with "ERROR <why>" on a failure.

import { createRequire } from "node:module";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";

const [modulesDir, specText] = process.argv.slice(2);
if (!modulesDir || !specText) {
  console.error("usage: natsjs_load.mjs MODULES_DIR SPEC_JSON");
  process.exit(2);
}
const spec = JSON.parse(specText);
// The packages are CommonJS: resolve them from MODULES_DIR, wherever this script is installed.
const require = createRequire(join(modulesDir, "bench.cjs"));
const { connect } = require("@nats-io/transport-node");
const { jetstream } = require("@nats-io/jetstream");

function waitForGo() {
  return new Promise((resolve) => {
    const lines = createInterface({ input: process.stdin });
    lines.once("line", () => {
      lines.close();
      resolve();
    });
  });
}

async function publishSequential(js) {
  const payload = new Uint8Array(spec.payload_size).fill(120);
  const latencies = [];
  let acked = 0;
  let errors = 0;
  let firstError = "";
  const start = performance.now();
  const openAt = start + spec.warmup * 1000;
  const closeAt = openAt + spec.duration * 1000;
  let last = openAt;
  for (let t0 = performance.now(); t0 < closeAt; t0 = performance.now()) {
    try {
      await js.publish(spec.subject, payload);
    } catch (err) {
      errors += 1;
      firstError ||= String(err);
      continue;
    }
    last = performance.now();
    acked += 1;
    if (t0 >= openAt) latencies.push((last - t0) / 1000);
  }
  const seconds = (last - openAt) / 1000;
  return { rate: seconds > 0 ? latencies.length / seconds : 0, acked, errors, first_error: firstError, latencies };
}

async function publishWindow(js) {
  const payload = new Uint8Array(spec.payload_size).fill(120);
  const start = performance.now();
  const openAt = start + spec.warmup * 1000;
  const closeAt = openAt + spec.duration * 1000;
  let inFlight = 0;
  let acked = 0;
  let inWindow = 0;
  let errors = 0;
  let firstError = "";
  let lastAck = start;
  let wake = null;
  const settled = () => {
    inFlight -= 1;
    if (wake) {
      const w = wake;
      wake = null;
      w();
    }
  };
  while (performance.now() < closeAt) {
    if (inFlight >= spec.window) {
      await new Promise((resolve) => {
        wake = resolve;
      });
      continue;
    }
    inFlight += 1;
    js.publish(spec.subject, payload).then(
      () => {
        acked += 1;
        lastAck = performance.now();
        if (lastAck >= openAt && lastAck < closeAt) inWindow += 1;
        settled();
      },
      (err) => {
        errors += 1;
        firstError ||= String(err);
        settled();
      },
    );
  }
  while (inFlight > 0) {
    await new Promise((resolve) => {
      wake = resolve;
    });
  }
  const common = { acked, errors, first_error: firstError, in_flight_limit: spec.window };
  if (inWindow || !acked) return { rate: inWindow / spec.duration, rate_from: "window", ...common };
  // A server that answers in bursts further apart than the window (nats-server with
  // sync_interval: always): every ack over the whole run instead, as the raw rows do.
  return { rate: (acked * 1000) / (lastAck - start), rate_from: "whole run", ...common };
}

async function fetchAll(js, nc) {
  const consumer = await js.consumers.get(spec.stream, spec.durable);
  let received = 0;
  const start = performance.now();
  let lastProgress = start;
  const errors = [];
  while (received < spec.messages) {
    const before = received;
    const batch = await consumer.fetch({ max_messages: spec.batch, expires: 2000 });
    for await (const m of batch) {
      m.ack();
      received += 1;
    }
    if (received > before) {
      lastProgress = performance.now();
    } else if (performance.now() - lastProgress > spec.stall_seconds * 1000) {
      errors.push(`nats.js fetch: no message for ${spec.stall_seconds}s at ${received} of ${spec.messages}`);
      break;
    }
  }
  await nc.flush(); // every ack read by the server
  return { messages: received, seconds: (performance.now() - start) / 1000, errors };
}

async function main() {
  const nc = await connect({ servers: spec.url, maxReconnectAttempts: 0, reconnect: false });
  const js = jetstream(nc);
  console.log("ready");
  await waitForGo();
  const cpu = process.cpuUsage();
  let result;
  if (spec.mode === "publish") result = await publishSequential(js);
  else if (spec.mode === "publish_async") result = await publishWindow(js);
  else if (spec.mode === "fetch") result = await fetchAll(js, nc);
  else throw new Error(`unknown mode ${spec.mode}`);
  const used = process.cpuUsage(cpu);
  result.client_cpu_s = (used.user + used.system) / 1e6;
  await nc.close();
  console.log(`RESULT ${JSON.stringify(result)}`);
}

main().catch((err) => {
  console.log(`ERROR ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
