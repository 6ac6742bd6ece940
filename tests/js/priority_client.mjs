// nats.js with a priority group (ADR-42), unmodified, against a running server.
//
//     node tests/js/priority_client.mjs nats://127.0.0.1:4222
//
// A pinned_client consumer: a fetch with its group is pinned (every message carries the pin,
// consumer info names it), and jsm.consumers.unpin unpins it. Runs under harness.mjs;
// tests/e2e/test_priority_groups.py runs it against both servers.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { check, eq, ok, run, step } from "./harness.mjs";

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "PG", subjects: ["pg.>"] });
  const js = jetstream(nc);
  for (let i = 0; i < 4; i++) await js.publish(`pg.${i}`, `${i}`);
  await jsm.consumers.add("PG", {
    durable_name: "C",
    ack_policy: "explicit",
    priority_policy: "pinned_client",
    priority_groups: ["A"],
  });
  ok("connect");

  step("pinned fetch");
  const consumer = await js.consumers.get("PG", "C");
  const got = [];
  for await (const m of await consumer.fetch({ max_messages: 2, expires: 5000, group: "A" })) {
    got.push([m.string(), m.headers?.get("Nats-Pin-Id")]);
    m.ack();
  }
  eq(got.map(([data]) => data), ["0", "1"], "messages");
  const pin = got[0][1];
  check(pin && pin.length === 22 && got[1][1] === pin, `pins ${JSON.stringify(got)}`);
  const info = await consumer.info();
  eq(info.priority_groups[0].pinned_client_id, pin, "consumer info names the pin");
  ok("pinned fetch");

  step("unpin");
  await jsm.consumers.unpin("PG", "C", "A");
  const after = await jsm.consumers.info("PG", "C");
  eq(after.priority_groups, [{ group: "A", pinned_ts: "0001-01-01T00:00:00Z" }], "unpinned");
  ok("unpin");
  await nc.close();
});
