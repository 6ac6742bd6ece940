// nats.js Key-Value and Object Store buckets created with `compression: true` (their streams
// get compression "s2"), unmodified, against a running server.
//
//     node tests/js/compressed_client.mjs nats://127.0.0.1:4222
//
// Runs under harness.mjs; tests/e2e/test_compression.py runs it against an agent and against
// nats-server.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { createHash } from "node:crypto";
import { eq, ok, run, step } from "./harness.mjs";

const sha = (b) => createHash("sha256").update(b).digest("hex");

run(async (url) => {
  const nc = await connect({ servers: url, name: "nats.js compressed", maxReconnectAttempts: 0 });
  const js = jetstream(nc, { timeout: 20_000 });
  const jsm = await jetstreamManager(nc);
  ok("connect");

  step("kv bucket");
  const kv = await new Kvm(js).create("ZKV", { history: 3, compression: true });
  eq((await kv.status()).compression, true, "kv status compression");
  eq((await jsm.streams.info("KV_ZKV")).config.compression, "s2", "kv stream compression");
  ok("kv bucket with compression");

  step("kv put/get");
  const value = (i) => `{"user": ${i}, "role": "member", "team": "platform"}`.repeat(20);
  for (let i = 0; i < 40; i++) await kv.put(`users.${i}`, value(i));
  await kv.put("users.7", "changed");
  eq((await kv.get("users.3")).string(), value(3), "get users.3");
  eq((await kv.get("users.7")).string(), "changed", "get users.7");
  eq((await kv.get("users.7", { revision: 8 })).string(), value(7), "users.7 at revision 8");
  const keys = [];
  for await (const k of await kv.keys("users.>")) keys.push(k);
  eq(keys.length, 40, "keys");
  const history = [];
  for await (const e of await kv.history({ key: "users.7" })) history.push(e.string());
  eq(history, [value(7), "changed"], "history of users.7");
  ok("kv put, get, keys and history");

  step("object store");
  const os = await new Objm(js).create("ZOBJ", { compression: true });
  eq((await os.status()).compression, true, "object store status compression");
  const text = new TextEncoder().encode("a compressible line of text\n".repeat(100_000));
  const info = await os.putBlob({ name: "text.txt" }, text);
  eq(info.size, text.length, "object size");
  const back = await os.getBlob("text.txt");
  eq([back.length, sha(back)], [text.length, sha(text)], "object read back");
  ok("object store put and get");

  await nc.drain();
});
