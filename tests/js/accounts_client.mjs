// nats.js (unmodified) in two accounts of one server, with the same names in both.
//
//     node tests/js/accounts_client.mjs NATS_URL
//
// Users a/a and b/b are in accounts A and B. Each account makes a stream ORDERS with a
// durable pull consumer C and a KV bucket cfg; each publishes its own messages and values.
// Then each reads back: its own messages from its consumer, its own value of every key, its
// own account info, and nothing of the other's (a key only B has is not found in A; jetstream
// in A fetches only A's messages). Runs under harness.mjs; tests/tenancy/test_accounts_js.py
// runs it against an agent and against nats-server with the same accounts config.

import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { collect, eq, ok, run, step } from "./harness.mjs";

async function account(url, user) {
  const nc = await connect({ servers: url, user, pass: user, maxReconnectAttempts: 0 });
  return { user, nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
}

run(async (url) => {
  const a = await account(url, "a");
  const b = await account(url, "b");
  ok("connect as a and b");

  step("same names in both accounts");
  for (const acc of [a, b]) {
    await acc.jsm.streams.add({ name: "ORDERS", subjects: ["orders.>"] });
    await acc.jsm.consumers.add("ORDERS", { durable_name: "C", ack_policy: AckPolicy.Explicit });
  }
  ok("same names in both accounts");

  step("publish");
  for (let i = 0; i < 3; i++) await a.js.publish("orders.new", `a${i}`);
  for (let i = 0; i < 2; i++) await b.js.publish("orders.new", `b${i}`);
  ok("publish");

  step("fetch");
  for (const [acc, want] of [[a, ["a0", "a1", "a2"]], [b, ["b0", "b1"]]]) {
    const c = await acc.js.consumers.get("ORDERS", "C");
    const got = await collect(await c.fetch({ max_messages: 10, expires: 1500 }));
    eq(got.map((m) => m.string()), want, `messages fetched in ${acc.user}`);
    for (const m of got) eq(await m.ackAck(), true, `ackAck in ${acc.user}`);
  }
  ok("fetch");

  step("kv");
  const kva = await new Kvm(a.nc).create("cfg");
  const kvb = await new Kvm(b.nc).create("cfg");
  await kva.put("k", "from-a");
  await kvb.put("k", "from-b");
  await kvb.put("only-b", "secret");
  eq((await kva.get("k"))?.string(), "from-a", "a's value of k");
  eq((await kvb.get("k"))?.string(), "from-b", "b's value of k");
  eq(await kva.get("only-b"), null, "a key only b has, read in a");
  ok("kv");

  step("account info");
  const infoA = await a.jsm.getAccountInfo();
  const infoB = await b.jsm.getAccountInfo();
  eq([infoA.streams, infoA.consumers], [2, 1], "a's streams and consumers");
  eq([infoB.streams, infoB.consumers], [2, 1], "b's streams and consumers");
  const names = await collect(a.jsm.streams.names());
  eq(names.sort(), ["KV_cfg", "ORDERS"], "a's stream names");
  ok("account info");

  await a.nc.close();
  await b.nc.close();
});
