// nats.js as an application under load, for the fault suite: publishers and a pull consumer
// that work while agents come and go, each line of output one event for the Python side.
//
//     node tests/js/load_client.mjs NATS_URLS STREAM SUBJECT PUBLISHERS FIRST_NUMBER CONSUMER TIMEOUT_MS
//
// NATS_URLS is a comma-separated list; TIMEOUT_MS is how long a publisher waits for a PubAck. Each publisher is its own connection publishing
// numbered messages one after another (`js.publish`, awaited, never retried) and prints
// `ack <id> <seq>` or `err <id> <why>`; a publish it gave up on is an error too. The consumer
// (CONSUMER, a durable pull consumer that must exist) fetches and acks each message with
// ackAck() (acknowledged by the server) and prints `got <id> <seq>`, then `acked <id> <seq>`
// once the server confirmed the ack. A line "stop" on standard input ends the publishers; the
// consumer goes on until "drained" follows (nothing pending), then the script prints "done".

import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { createInterface } from "node:readline";

const [urls, STREAM, SUBJECT, PUBLISHERS, FIRST, CONSUMER, TIMEOUT_MS] = process.argv.slice(2);
if (!TIMEOUT_MS) {
  console.error(
    "usage: load_client.mjs NATS_URLS STREAM SUBJECT PUBLISHERS FIRST_NUMBER CONSUMER TIMEOUT_MS",
  );
  process.exit(2);
}
const PAD = ".".repeat(48);
let publishing = true;
let consuming = true;

function options(name) {
  return {
    servers: urls.split(","),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 100,
    waitOnFirstConnect: true,
  };
}

async function publisher(number) {
  const nc = await connect(options(`load-publisher-${number}`));
  const js = jetstream(nc, { timeout: Number(TIMEOUT_MS) });
  let n = 0;
  while (publishing) {
    n += 1;
    const id = `p${number}-${n}`;
    console.log(`sent ${id}`);
    try {
      const ack = await js.publish(SUBJECT, `${id}${PAD}`, { retries: 0 });
      console.log(`ack ${id} ${ack.seq}`);
    } catch (err) {
      const why = String(err.message ?? err).replaceAll("\n", " ");
      console.log(`err ${id} ${why} (on ${nc.getServer()})`);
    }
  }
  await nc.drain();
}

async function consumer() {
  const nc = await connect(options("load-consumer"));
  const js = jetstream(nc, { timeout: 8000 });
  while (consuming) {
    let batch;
    try {
      const c = await js.consumers.get(STREAM, CONSUMER);
      batch = await c.fetch({ max_messages: 250, expires: 1000 });
      // The batch's acks at once, each confirmed on its own: one commit for most.
      const acks = [];
      for await (const m of batch) {
        const id = m.string().split(".")[0];
        console.log(`got ${id} ${m.seq}`);
        acks.push(
          m.ackAck({ timeout: 5000 }).then(
            (ok) => ok && console.log(`acked ${id} ${m.seq}`),
            () => {},
          ),
        );
      }
      await Promise.all(acks);
    } catch (err) {
      console.log(`fetch-error ${String(err.message ?? err).replaceAll("\n", " ")}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await nc.close();
}

const lines = createInterface({ input: process.stdin });
const stopped = new Promise((resolve) => {
  lines.on("line", (line) => {
    if (line === "stop") publishing = false;
    if (line === "drained") {
      consuming = false;
      resolve();
    }
  });
});

const publishers = [];
for (let i = 0; i < Number(PUBLISHERS); i += 1) publishers.push(publisher(Number(FIRST) + i));
const consuming_ = consumer();
await Promise.all(publishers);
console.log("published");
await stopped;
await consuming_;
console.log("done");
process.exit(0);
