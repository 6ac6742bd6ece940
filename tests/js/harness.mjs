// What every nats.js script of tests/js runs under. tests/support/jsclient.py (`run_js`)
// starts a script as
//
//     node tests/js/<script>.mjs NATS_URL [ARG...]
//
// and a script is one function of the URL and its other arguments:
//
//     import { check, eq, ok, run, step } from "./harness.mjs";
//     run(async (url, stream) => {
//       step("publish");
//       ...
//       ok("publish", `seq ${seq}`);
//       return { seq };
//     });
//
// `step(name)` says what runs now, so that a failure names it; `ok(name, detail)` says a step
// passed. The output is a line "ok <name>[ <detail>]" per step as it passes, for a person
// reading a failure, then one last line, the report the Python side reads:
//
//     RESULT {"passed": [<name>, ...], "result": <what the function returned, or null>}
//     RESULT {"passed": [...], "failed": "<step>", "error": "<why, with its stack>"}
//
// exiting 0 and 1. A script still running after `timeout` ms fails in the step it is in.

let current = "start";
const passed = [];

export function step(name) {
  current = name;
}

export function ok(name, detail) {
  passed.push(name);
  console.log(detail === undefined ? `ok ${name}` : `ok ${name} ${detail}`);
}

export function check(cond, why) {
  if (!cond) throw new Error(why);
}

export function eq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: expected ${e}, got ${a}`);
}

export async function collect(iter) {
  const out = [];
  for await (const m of iter) out.push(m);
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `promise`, or an error saying `why()` if it has not settled within `ms`.
export async function within(ms, promise, why) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(why())), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

function report(fields, code) {
  console.log(`RESULT ${JSON.stringify({ passed, ...fields })}`);
  // Exit now: a connection a script left open must not keep node running.
  process.exit(code);
}

export function run(main, { timeout = 90_000 } = {}) {
  const [url, ...args] = process.argv.slice(2);
  if (!url) {
    console.error("usage: node SCRIPT NATS_URL [ARG...]");
    process.exit(2);
  }
  step("connect");
  const watchdog = setTimeout(() => {
    report({ failed: current, error: `timed out after ${timeout} ms` }, 1);
  }, timeout);
  main(url, ...args).then(
    (result) => {
      clearTimeout(watchdog);
      report({ result: result ?? null }, 0);
    },
    (err) => {
      clearTimeout(watchdog);
      report({ failed: current, error: String(err?.stack ?? err) }, 1);
    },
  );
}
