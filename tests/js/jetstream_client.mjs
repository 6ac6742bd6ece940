// nats.js, an independent client implementation, against a running agent.
//
//     node tests/js/jetstream_client.mjs nats://127.0.0.1:4222 [STREAM]
//
// Streams, publishes (with and without a message id), a durable pull consumer served with
// fetch(), next() and consume(), acks of every kind, a filtered consumer created through the
// CONSUMER.CREATE.<stream>.<name>.<filter> form, consumer info, and an ordered consumer; first
// a pull by hand with core NATS, which shows plainly what fetch() would only report as missed
// heartbeats.
// Runs under harness.mjs; its result says what it did, which tests/e2e/test_nats_js.py then
// checks with nats-py.

import { connect, createInbox, headers, nanos } from "@nats-io/transport-node";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { check, collect, eq, ok, run, step } from "./harness.mjs";

run(async (url, STREAM = "JSC") => {
  const nc = await connect({
    servers: url,
    name: "nats.js",
    maxReconnectAttempts: 0,
    // NATS_JS_DEBUG=1 prints the protocol, to see what nats.js asks of the agent.
    debug: process.env.NATS_JS_DEBUG === "1",
  });
  eq(nc.info.headers, true, "server INFO headers");
  ok("connect", `server_version=${nc.info.version}`);

  step("jetstreamManager");
  // Looks up $JS.API.INFO first, to see that JetStream is enabled for the account.
  const jsm = await jetstreamManager(nc);
  const account = await jsm.getAccountInfo();
  check(typeof account.streams === "number", `account info without streams: ${JSON.stringify(account)}`);
  ok("account info");

  step("streams.add");
  const si = await jsm.streams.add({ name: STREAM, subjects: [`${STREAM.toLowerCase()}.>`] });
  eq(si.config.name, STREAM, "created stream name");
  eq(si.state.messages, 0, "new stream messages");
  ok("stream created");

  const subj = (s) => `${STREAM.toLowerCase()}.${s}`;
  const js = jetstream(nc);

  step("publish");
  const pa1 = await js.publish(subj("a"), "one");
  const pa2 = await js.publish(subj("b"), new TextEncoder().encode("two"));
  const h = headers();
  h.set("X-Client", "nats.js");
  const pa3 = await js.publish(subj("a"), "three", { headers: h });
  eq([pa1.seq, pa2.seq, pa3.seq], [1, 2, 3], "sequences of plain publishes");
  eq(pa1.stream, STREAM, "puback stream");
  check(!pa1.duplicate && !pa3.duplicate, "a plain publish reported as a duplicate");
  ok("publish without msgID");

  step("publish msgID");
  const pa4 = await js.publish(subj("c"), "four", { msgID: "m-4" });
  const dup = await js.publish(subj("c"), "four again", { msgID: "m-4" });
  const pa5 = await js.publish(subj("c"), "five", { msgID: "m-5", expect: { lastSequence: 4 } });
  eq([pa4.seq, pa4.duplicate], [4, false], "first publish of m-4");
  eq([dup.seq, dup.duplicate], [4, true], "second publish of m-4");
  eq([pa5.seq, pa5.duplicate], [5, false], "publish of m-5");
  ok("publish with msgID (deduplicated)");

  step("publish expect mismatch");
  let refused = null;
  try {
    await js.publish(subj("c"), "wrong", { expect: { lastSequence: 1 } });
  } catch (err) {
    refused = err;
  }
  check(refused !== null, "a publish with a wrong expected last sequence was accepted");
  ok("publish with wrong lastSequence refused", `(${refused.message})`);

  step("streams.info");
  const info = await jsm.streams.info(STREAM);
  eq([info.state.messages, info.state.first_seq, info.state.last_seq], [5, 1, 5], "stream state");
  ok("stream info");

  step("streams.getMessage");
  const sm = await jsm.streams.getMessage(STREAM, { seq: 3 });
  eq([sm.subject, sm.seq, sm.string(), sm.header.get("X-Client")], [subj("a"), 3, "three", "nats.js"], "stored message 3");
  ok("get message");

  step("consumers.add");
  // With a durable_name and no filter nats.js uses $JS.API.CONSUMER.CREATE.<stream>.<durable>.
  const ci = await jsm.consumers.add(STREAM, {
    durable_name: "JSD",
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(30_000),
  });
  eq([ci.name, ci.config.durable_name, ci.num_pending], ["JSD", "JSD", 5], "created consumer");
  ok("durable pull consumer created");

  step("raw pull");
  // A pull request by hand. nats-server sends a consumer's message to the request's reply
  // subject but with the message's own stream subject in MSG; nats.js counts anything whose
  // subject is the request's inbox as a status message, so a server that put the inbox there
  // would starve every fetch() and next() until "heartbeats missed".
  await jsm.consumers.add(STREAM, { durable_name: "RAW", ack_policy: AckPolicy.None });
  const inbox = createInbox();
  const sub = nc.subscribe(inbox, { max: 1 });
  nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${STREAM}.RAW`, JSON.stringify({ batch: 1, expires: nanos(2000) }), {
    reply: inbox,
  });
  const raw = await Promise.race([
    (async () => {
      for await (const m of sub) return m;
      return null;
    })(),
    new Promise((resolve) => setTimeout(() => resolve(null), 3000)),
  ]);
  sub.unsubscribe();
  check(raw !== null, "no answer to a MSG.NEXT request in 3 s");
  check(raw.reply?.startsWith(`$JS.ACK.${STREAM}.RAW.1.1.1.`), `ack subject of message 1: ${raw.reply}`);
  eq(raw.subject, subj("a"), "MSG subject of a delivered message (its stream subject, not the pull inbox)");
  eq(new TextDecoder().decode(raw.data), "one", "payload of message 1");
  ok("raw pull: delivered with its stream subject and an ack subject");

  step("consumers.get");
  const c = await js.consumers.get(STREAM, "JSD");

  step("fetch");
  // fetch() asks for idle heartbeats (expires / 2) and ends the batch if two are missed.
  const first = await collect(await c.fetch({ max_messages: 3, expires: 2000 }));
  eq(first.map((m) => m.seq), [1, 2, 3], "fetched stream sequences");
  eq(first.map((m) => m.subject), [subj("a"), subj("b"), subj("a")], "fetched subjects");
  eq(first.map((m) => m.string()), ["one", "two", "three"], "fetched payloads");
  eq(first[2].headers?.get("X-Client"), "nats.js", "header of fetched message 3");
  eq(first.map((m) => m.info.deliveryCount), [1, 1, 1], "delivery counts");
  eq(first.map((m) => m.info.streamSequence), [1, 2, 3], "info.streamSequence");
  eq(first.map((m) => m.info.deliverySequence), [1, 2, 3], "info.deliverySequence");
  eq(first.map((m) => m.info.pending), [4, 3, 2], "info.pending");
  eq(first[0].info.stream, STREAM, "info.stream");
  eq(first[0].info.consumer, "JSD", "info.consumer");
  ok("fetch 3");

  step("acks");
  first[0].ack();
  eq(await first[1].ackAck(), true, "ackAck of message 2");
  // A nak with a reply subject, answered once it has been applied: nats-server applies acks on
  // another goroutine than the one serving pull requests, so a plain nak may land after the
  // next pull and let message 4 go first.
  await nc.request(first[2].reply, "-NAK", { timeout: 2000 });
  ok("ack, ackAck, nak");

  step("next");
  // The nak'd message comes back first, as a redelivery.
  const again = await c.next({ expires: 2000 });
  check(again !== null, "next() got nothing, expected the nak'd message 3 again");
  eq([again.seq, again.info.deliveryCount, again.redelivered], [3, 2, true], "redelivered message 3");
  eq(await again.ackAck(), true, "ackAck of redelivered message 3");
  const m4 = await c.next({ expires: 2000 });
  check(m4 !== null, "next() got nothing, expected message 4");
  eq([m4.seq, m4.string(), m4.info.pending], [4, "four", 1], "message 4");
  m4.working();
  eq(await m4.ackAck(), true, "ackAck of message 4");
  const m5 = await c.next({ expires: 2000 });
  check(m5 !== null, "next() got nothing, expected message 5");
  eq([m5.seq, m5.string()], [5, "five"], "message 5");
  m5.term();
  ok("next (redelivery after nak, working, term)");

  step("fetch empty");
  const started = Date.now();
  const none = await collect(await c.fetch({ max_messages: 2, expires: 1500 }));
  const waited = Date.now() - started;
  eq(none.length, 0, "messages fetched from a drained consumer");
  check(waited >= 1000, `an empty fetch ended after ${waited} ms, before its 1500 ms expiry`);
  const nothing = await c.next({ expires: 1000 });
  eq(nothing, null, "next() on a drained consumer");
  ok("fetch and next on a drained consumer expire empty", `(${waited} ms)`);

  step("consumer info");
  // A flush so the unconfirmed ack and term have reached the agent; then poll until committed.
  await nc.flush();
  let cinfo;
  for (let i = 0; i < 50; i++) {
    cinfo = await c.info();
    if (cinfo.num_ack_pending === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  eq(
    [cinfo.delivered.stream_seq, cinfo.delivered.consumer_seq, cinfo.ack_floor.stream_seq],
    [5, 6, 5],
    "delivered and ack floor",
  );
  eq([cinfo.num_ack_pending, cinfo.num_pending, cinfo.num_redelivered], [0, 0, 0], "pending counts");
  ok("consumer info");

  step("consume");
  for (let i = 0; i < 10; i++) await js.publish(subj("d"), `d${i}`);
  const consumed = [];
  const messages = await c.consume({ max_messages: 4, expires: 2000 });
  const timer = setTimeout(() => messages.stop(), 10_000);
  for await (const m of messages) {
    consumed.push(m.seq);
    m.ack();
    if (consumed.length === 10) break;
  }
  clearTimeout(timer);
  eq(consumed, [6, 7, 8, 9, 10, 11, 12, 13, 14, 15], "consumed stream sequences");
  ok("consume 10 with max_messages 4");

  step("filtered consumer");
  // A single filter subject: nats.js uses $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>.
  const fci = await jsm.consumers.add(STREAM, {
    durable_name: "JSF",
    filter_subject: subj("c"),
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(1_000),
  });
  eq([fci.config.filter_subject, fci.num_pending], [subj("c"), 2], "filtered consumer");
  const fc = await js.consumers.get(STREAM, "JSF");
  const filtered = await collect(await fc.fetch({ max_messages: 5, expires: 1000 }));
  eq(filtered.map((m) => m.seq), [4, 5], "filtered fetch");
  // Acks 4 only: 5 stays pending for the Python side to see redelivered after ack_wait.
  eq(await filtered[0].ackAck(), true, "ackAck of filtered message 4");
  ok("filtered consumer (4 acked, 5 left pending)");

  step("consumers.list");
  const names = [];
  for await (const n of jsm.consumers.list(STREAM)) names.push(n.name);
  eq(names.sort(), ["JSD", "JSF", "RAW"], "consumer list");
  ok("consumer list");

  step("ordered consumer");
  // No consumer name: an ordered consumer, an ephemeral the client creates and recreates.
  const oc = await js.consumers.get(STREAM, {
    filter_subjects: [subj("a")],
    deliver_policy: DeliverPolicy.All,
  });
  const ordered = await collect(await oc.fetch({ max_messages: 2, expires: 2000 }));
  eq(ordered.map((m) => [m.seq, m.string()]), [[1, "one"], [3, "three"]], "ordered consumer");
  ok("ordered consumer fetch");

  await nc.drain();
  return {
    stream: STREAM,
    acked: [1, 2, 3, 4],
    termed: [5],
    consumed,
    filtered_pending: [5],
  };
}, { timeout: 45_000 });
