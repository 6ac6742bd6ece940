// nats.js's deletes, unmodified, against a running server: `deleteMessage(stream, seq)` erases
// (it sends no `no_erase`), `deleteMessage(stream, seq, false)` does not, and a purge request
// carrying the header `InfiniStream-Erase: true` (InfiniStream's extension; nats-server ignores
// request headers) purges on both servers.
//
//     node tests/js/erase_client.mjs nats://127.0.0.1:4222 STREAM
//
// Runs under harness.mjs; tests/e2e/test_erase_requests.py runs it against an agent and
// against nats-server.

import { connect, headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { eq, ok, run, step } from "./harness.mjs";

run(async (url, stream) => {
  const nc = await connect({ servers: url, name: "nats.js erase", maxReconnectAttempts: 0 });
  const js = jetstream(nc, { timeout: 20_000 });
  const jsm = await jetstreamManager(nc);
  ok("connect");

  step("stream");
  const subject = stream.toLowerCase();
  await jsm.streams.add({ name: stream, subjects: [`${subject}.>`] });
  for (let i = 1; i <= 6; i++) await js.publish(`${subject}.${i % 2}`, `m${i}`);
  ok("stream with six messages");

  step("delete");
  eq(await jsm.streams.deleteMessage(stream, 2), true, "deleteMessage (erase)");
  eq(await jsm.streams.deleteMessage(stream, 4, false), true, "deleteMessage (no erase)");
  ok("deleteMessage with and without erase");

  step("purge with the erase header");
  const h = headers();
  h.set("InfiniStream-Erase", "true");
  const reply = await nc.request(
    `$JS.API.STREAM.PURGE.${stream}`,
    JSON.stringify({ filter: `${subject}.1` }),
    { headers: h, timeout: 20_000 },
  );
  eq(reply.json(), { type: "io.nats.jetstream.api.v1.stream_purge_response", success: true, purged: 3 }, "purge");
  ok("purge with the erase header");

  step("state");
  const info = await jsm.streams.info(stream);
  eq([info.state.messages, info.state.first_seq, info.state.last_seq], [1, 6, 6], "state");
  ok("state");
  await nc.close();
});
