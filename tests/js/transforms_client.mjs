// nats.js, unmodified, on a stream with a subject transform, against a running server.
//
//     node tests/js/transforms_client.mjs nats://127.0.0.1:4222
//
// A stream whose subject_transform maps `tr.<a>.<b>` to `mapped.<b>.<a>`; published messages
// are read back by sequence and by their mapped subject. Runs under harness.mjs;
// tests/e2e/test_transforms_streams.py runs it against both servers.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { eq, ok, run, step } from "./harness.mjs";

run(async (url) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  ok("connect");

  step("stream with a transform");
  const si = await jsm.streams.add({
    name: "JST",
    subjects: ["tr.>"],
    subject_transform: { src: "tr.*.*", dest: "mapped.{{wildcard(2)}}.$1" },
  });
  eq(si.config.subject_transform, { src: "tr.*.*", dest: "mapped.{{wildcard(2)}}.$1" }, "config");
  ok("stream with a transform");

  step("mapped subjects");
  const a = await js.publish("tr.x.1", "a");
  const b = await js.publish("tr.y.2", "b");
  eq([a.seq, b.seq], [1, 2], "sequences");
  const first = await jsm.streams.getMessage("JST", { seq: 1 });
  eq(first.subject, "mapped.1.x", "first subject");
  const last = await jsm.streams.getMessage("JST", { last_by_subj: "mapped.2.y" });
  eq([last.seq, last.string()], [2, "b"], "last by mapped subject");
  ok("mapped subjects");
  await nc.drain();
});
