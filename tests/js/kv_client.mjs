// nats.js Key-Value (@nats-io/kv), unmodified, against a running server.
//
//     node tests/js/kv_client.mjs nats://127.0.0.1:4222
//
// Buckets, put/get/create/update/delete/purge with revisions, keys with filters, history,
// watch with every include option, ignoreDeletes, headers only and key filters, purgeDeletes,
// status, a key created with a TTL on a bucket with limit markers, and a value aged out of
// a bucket with a TTL. Runs under harness.mjs; tests/e2e/test_kv_js.py runs it against an
// agent and against nats-server.

import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { KvWatchInclude, Kvm } from "@nats-io/kv";
import { check, collect, eq, ok, run, sleep, step, within } from "./harness.mjs";

// A watcher read a few entries at a time: its iterator is taken once and kept with it.
const iterators = new WeakMap();

async function take(qi, n, what) {
  if (!iterators.has(qi)) iterators.set(qi, qi[Symbol.asyncIterator]());
  const it = iterators.get(qi);
  const out = [];
  const reading = (async () => {
    while (out.length < n) {
      const { value, done } = await it.next();
      if (done) break;
      out.push(value);
    }
  })();
  await within(15_000, reading, () => `${what}: got ${JSON.stringify(out.map(view))}, ${n} wanted in time`);
  return out;
}

const view = (e) => [e.key, e.string(), e.operation];

run(async (url) => {
  const nc = await connect({ servers: url, name: "nats.js kv", maxReconnectAttempts: 0 });
  const js = jetstream(nc);
  const kvm = new Kvm(js);
  ok("connect");

  step("create bucket");
  const kv = await kvm.create("JSKV", { history: 5 });
  const status0 = await kv.status();
  eq([status0.bucket, status0.values, status0.history], ["JSKV", 0, 5], "new bucket status");
  ok("bucket created");

  step("put/get");
  const r1 = await kv.put("a", "1");
  const r2 = await kv.put("b", "x");
  const r3 = await kv.put("a", "2");
  eq([r1, r2, r3], [1, 2, 3], "revisions");
  const a = await kv.get("a");
  eq([a.key, a.string(), a.revision, a.operation], ["a", "2", 3, "PUT"], "get a");
  eq((await kv.get("a", { revision: 1 })).string(), "1", "get a at revision 1");
  eq(await kv.get("missing"), null, "get of a missing key");
  ok("put and get");

  step("create/update");
  eq(await kv.create("c", "new"), 4, "create");
  let refused = null;
  try {
    await kv.create("c", "again");
  } catch (err) {
    refused = err;
  }
  check(refused !== null, "a second create of c was accepted");
  eq(await kv.update("c", "newer", 4), 5, "update with the right revision");
  refused = null;
  try {
    await kv.update("c", "stale", 4);
  } catch (err) {
    refused = err;
  }
  check(refused !== null, "an update with a stale revision was accepted");
  ok("create and update");

  step("delete/purge");
  await kv.delete("c");
  const deleted = await kv.get("c");
  eq([deleted.operation, deleted.revision], ["DEL", 6], "a deleted key");
  eq(await kv.create("c", "back"), 7, "create after delete");
  await kv.put("p", "1");
  await kv.put("p", "2");
  await kv.purge("p");
  eq((await collect(await kv.history({ key: "p" }))).map(view), [["p", "", "PURGE"]], "purged history");
  ok("delete and purge");

  step("keys");
  await kv.put("users.ann", "1");
  await kv.put("users.bob", "1");
  const keys = (await collect(await kv.keys())).sort();
  eq(keys, ["a", "b", "c", "users.ann", "users.bob"], "keys");
  eq((await collect(await kv.keys("users.*"))).sort(), ["users.ann", "users.bob"], "filtered keys");
  eq((await collect(await kv.keys(["a", "b"]))).sort(), ["a", "b"], "keys of two filters");
  ok("keys");

  step("history");
  const hist = await collect(await kv.history({ key: "a" }));
  eq(hist.map((e) => [e.string(), e.revision]), [["1", 1], ["2", 3]], "history of a");
  ok("history");

  step("watch");
  const w = await kv.watch({ key: "users.>" });
  const initial = await take(w, 2, "initial values");
  eq(initial.map(view), [["users.ann", "1", "PUT"], ["users.bob", "1", "PUT"]], "initial values");
  eq(initial.map((e) => e.isUpdate), [false, true], "which are updates");
  await kv.put("users.ann", "2");
  await kv.delete("users.bob");
  await kv.put("other", "not watched");
  await kv.put("users.cy", "1");
  const later = await take(w, 3, "updates");
  eq(later.map(view), [["users.ann", "2", "PUT"], ["users.bob", "", "DEL"], ["users.cy", "1", "PUT"]], "updates");
  w.stop();
  ok("watch last values and updates");

  step("watch options");
  const wh = await kv.watch({ key: "a", include: KvWatchInclude.AllHistory });
  eq((await take(wh, 2, "history")).map((e) => e.string()), ["1", "2"], "watch with history");
  wh.stop();
  const wu = await kv.watch({ include: KvWatchInclude.UpdatesOnly });
  await kv.put("b", "y");
  eq((await take(wu, 1, "updates only")).map(view), [["b", "y", "PUT"]], "updates only");
  wu.stop();
  const wd = await kv.watch({ key: ["users.ann", "users.bob"], ignoreDeletes: true });
  await sleep(200);
  await kv.put("users.bob", "back");
  const got = await take(wd, 2, "ignore deletes");
  eq(got.map(view), [["users.ann", "2", "PUT"], ["users.bob", "back", "PUT"]], "ignoring deletes");
  wd.stop();
  const wm = await kv.watch({ key: "users.ann", headers_only: true });
  const meta = (await take(wm, 1, "headers only"))[0];
  eq([meta.key, meta.string(), meta.length], ["users.ann", "", 1], "headers only");
  wm.stop();
  ok("watch include history, updates only, ignore deletes, headers only");

  step("purgeDeletes");
  const purged = await kv.purgeDeletes(-1);
  check(purged.success, "purgeDeletes failed");
  eq(await kv.get("p"), null, "p after purgeDeletes");
  ok("purgeDeletes");

  step("status");
  const st = await kv.status();
  eq([st.bucket, st.history, st.values > 0, st.size > 0], ["JSKV", 5, true, true], "status");
  ok("status");

  step("ttl");
  const kt = await kvm.create("JSTTL", { markerTTL: 1000 });
  const st2 = await kt.status();
  eq([st2.markerTTL, st2.streamInfo.config.allow_msg_ttl], [1000, true], "marker TTL bucket");
  const tw = await kt.watch();
  await kt.create("short", "v", "1s");
  await kt.put("long", "v");
  const seen = await take(tw, 3, "a key created with a TTL going");
  eq(seen.map(view), [["short", "v", "PUT"], ["long", "v", "PUT"], ["short", "", "PURGE"]], "ttl watch");
  eq((await kt.get("long")).string(), "v", "the other key stays");
  tw.stop();
  ok("per-key TTL and its marker");

  step("destroy");
  check(await kt.destroy(), "destroy failed");
  ok("destroy");

  await nc.drain();
});
