// nats.js Object Store (@nats-io/obj), unmodified, against a running server.
//
//     node tests/js/obj_client.mjs nats://127.0.0.1:4222
//
// A store, put and get of a large object in many chunks (from a ReadableStream, read back as a
// stream and as a blob, the digest checked by the client), info, list, watch, links to an
// object and to another store, meta updates and renames, delete, seal and status. Runs under
// harness.mjs; tests/e2e/test_objstore_js.py runs it against an agent and against nats-server.

import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { createHash, randomBytes } from "node:crypto";
import { check, eq, ok, run, step } from "./harness.mjs";

const sha = (data) => createHash("sha256").update(data).digest("hex");

function streamOf(data, piece) {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= data.length) {
        controller.close();
        return;
      }
      controller.enqueue(data.subarray(at, at + piece));
      at += piece;
    },
  });
}

async function readAll(rs) {
  const parts = [];
  const reader = rs.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parts.push(value);
  }
  return Buffer.concat(parts);
}

run(async (url) => {
  const nc = await connect({ servers: url, name: "nats.js obj", maxReconnectAttempts: 0 });
  const js = jetstream(nc, { timeout: 20_000 });
  const objm = new Objm(js);
  ok("connect");

  step("create store");
  const os = await objm.create("JSOBJ", { description: "nats.js objects" });
  const st0 = await os.status();
  eq([st0.bucket, st0.description, st0.sealed, st0.size], ["JSOBJ", "nats.js objects", false, 0], "new store");
  ok("store created");

  step("put large");
  const big = randomBytes(3 * 1024 * 1024 + 777);
  const info = await os.put({ name: "big.bin", description: "three MiB" }, streamOf(big, 100_000));
  eq([info.name, info.size, info.chunks, info.deleted], ["big.bin", big.length, 25, false], "put info");
  ok("put a large object from a stream");

  step("get large");
  const res = await os.get("big.bin");
  const back = await readAll(res.data);
  const readError = await res.error;
  check(readError === null || readError === undefined, `get reported ${readError}`);
  eq([back.length, sha(back)], [big.length, sha(big)], "object read back");
  const blob = await os.getBlob("big.bin");
  eq(sha(blob), sha(big), "blob read back");
  eq(await os.get("missing"), null, "get of a missing object");
  ok("get it back as a stream and as a blob");

  step("info and list");
  await os.putBlob({ name: "small", headers: undefined }, new TextEncoder().encode("tiny"));
  await os.putBlob({ name: "empty" }, new Uint8Array(0));
  eq((await os.getBlob("empty")).length, 0, "empty object");
  const si = await os.info("small");
  eq([si.name, si.size, si.chunks, si.bucket], ["small", 4, 1, "JSOBJ"], "info");
  eq((await os.list()).map((i) => i.name).sort(), ["big.bin", "empty", "small"], "list");
  ok("info and list");

  step("watch");
  const w = await os.watch({ includeHistory: true });
  const it = w[Symbol.asyncIterator]();
  const initial = [];
  for (let i = 0; i < 3; i++) initial.push((await it.next()).value.name);
  eq(initial.sort(), ["big.bin", "empty", "small"], "watch history");
  await os.putBlob({ name: "later" }, new TextEncoder().encode("new"));
  const later = (await it.next()).value;
  eq([later.name, later.isUpdate], ["later", true], "watch update");
  w.stop();
  ok("watch");

  step("links");
  const link = await os.link("small-link", si);
  eq([link.name, link.options.link.name], ["small-link", "small"], "link info");
  eq(new TextDecoder().decode(await os.getBlob("small-link")), "tiny", "read through a link");
  const other = await objm.create("JSOTHER");
  await other.putBlob({ name: "there" }, new TextEncoder().encode("elsewhere"));
  const storeLink = await os.linkStore("other-store", other);
  eq([storeLink.options.link.bucket, storeLink.options.link.name ?? ""], ["JSOTHER", ""], "store link");
  const otherInfo = await other.info("there");
  await os.link("there-link", otherInfo);
  eq(new TextDecoder().decode(await os.getBlob("there-link")), "elsewhere", "cross-store link");
  ok("links to an object and to a store");

  step("update meta");
  await os.update("small", { name: "renamed", description: "was small" });
  eq(await os.info("small"), null, "old name after rename");
  const renamed = await os.info("renamed");
  eq([renamed.name, renamed.description, renamed.size], ["renamed", "was small", 4], "renamed");
  eq(new TextDecoder().decode(await os.getBlob("renamed")), "tiny", "renamed content");
  ok("update meta and rename");

  step("delete");
  const purge = await os.delete("big.bin");
  check(purge.success, "delete failed");
  eq(await os.get("big.bin"), null, "deleted object");
  eq((await os.list()).map((i) => i.name).sort(), ["empty", "later", "other-store", "renamed", "small-link", "there-link"], "list after delete");
  ok("delete");

  step("seal");
  const sealed = await os.seal();
  eq(sealed.sealed, true, "sealed status");
  let refused = null;
  try {
    await os.putBlob({ name: "too late" }, new TextEncoder().encode("x"));
  } catch (err) {
    refused = err;
  }
  check(refused !== null, "a put into a sealed store was accepted");
  eq(new TextDecoder().decode(await os.getBlob("renamed")), "tiny", "reading a sealed store");
  ok("seal");

  step("status");
  const st = await os.status();
  eq([st.bucket, st.sealed, st.size > 0], ["JSOBJ", true, true], "status");
  ok("status");

  await nc.drain();
});
