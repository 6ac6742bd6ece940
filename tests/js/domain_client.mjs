// nats.js through a JetStream domain (jetstream(nc, { domain })), unmodified, against a
// running server whose config says `jetstream { domain: <domain> }`.
//
//     node tests/js/domain_client.mjs nats://127.0.0.1:4222 hub
//
// Manages a stream, publishes (the PubAck names the domain), reads the account info, and
// puts and gets Key-Value entries, all under `$JS.<domain>.API`. Runs under harness.mjs;
// tests/e2e/test_domains.py runs it against both servers.

import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { eq, ok, run, step } from "./harness.mjs";

run(async (url, domain) => {
  const nc = await connect({ servers: url, maxReconnectAttempts: 0 });
  eq(nc.info?.domain, domain, "INFO names the domain");
  const jsm = await jetstreamManager(nc, { domain });
  ok("connect");

  step("account");
  const account = await jsm.getAccountInfo();
  eq(account.domain, domain, "account info domain");
  ok("account");

  step("stream");
  const si = await jsm.streams.add({ name: "DOM", subjects: ["dom.>"] });
  eq(si.domain, undefined, "a lone server's create response names no domain");
  const js = jetstream(nc, { domain });
  const ack = await js.publish("dom.a", "1");
  eq([ack.stream, ack.seq, ack.domain], ["DOM", 1, domain], "PubAck");
  const info = await jsm.streams.info("DOM");
  eq([info.domain, info.state.messages], [domain, 1], "stream info");
  const msg = await jsm.streams.getMessage("DOM", { seq: 1 });
  eq(msg.string(), "1", "message read through the domain");
  ok("stream");

  step("kv");
  const kv = await new Kvm(js).create("DOMKV");
  const rev = await kv.put("k", "v");
  eq(rev, 1, "kv put revision");
  const entry = await kv.get("k");
  eq(entry?.string(), "v", "kv get");
  ok("kv");
  await nc.drain();
});
