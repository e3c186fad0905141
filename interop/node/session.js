'use strict';
// The interop session of ../ws_test.go, spoken by the `ws` package: each step's request is
// sent and what comes back is printed as one JSON line {"step", "kind", ...} for the Go test
// to check against the same expectations as the Go clients.
//
//   node session.js ws://127.0.0.1:PORT

const WebSocket = require('ws');

const url = process.argv[2];
if (!url) {
  console.error('usage: node session.js ws://IP:PORT');
  process.exit(2);
}
setTimeout(() => {
  console.error('session timed out');
  process.exit(3);
}, 60000).unref();

const ws = new WebSocket(url, { perMessageDeflate: false });
const events = [];
let waiter = null;
function push(ev) {
  if (waiter) {
    const w = waiter;
    waiter = null;
    w(ev);
  } else {
    events.push(ev);
  }
}
function next() {
  return new Promise((resolve) => {
    if (events.length > 0) resolve(events.shift());
    else waiter = resolve;
  });
}
ws.on('message', (data, isBinary) => push({ kind: 'message', binary: isBinary, text: data.toString('utf8') }));
ws.on('pong', (data) => push({ kind: 'pong', text: data.toString('utf8') }));
ws.on('close', (code, reason) => push({ kind: 'close', code, text: reason.toString('utf8') }));
ws.on('error', (err) => push({ kind: 'error', text: err.message }));

function report(step, ev) {
  process.stdout.write(JSON.stringify({ step, ...ev }) + '\n');
}

async function request(step, msg) {
  ws.send(msg);
  report(step, await next());
}

async function main() {
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  await request('initialize', '{"id":1,"method":"initialize","params":{"clientName":"node-ws"}}');
  ws.send('{"method":"initialized","params":{}}');
  await request('environment/info', '{"id":2,"method":"environment/info"}');
  await request('environment/status', '{"id":3,"method":"environment/status"}');
  await request('unknown', '{"id":4,"method":"nope/nope"}');
  ws.ping('interop-ping');
  report('ping', await next());
  await request('large', '{"id":5,"method":"' + 'm'.repeat(1 << 20) + '"}');
  const frag = '{"id":6,"method":"environment/status"}';
  ws.send(frag.slice(0, 10), { fin: false });
  ws.send(frag.slice(10, 20), { fin: false });
  ws.send(frag.slice(20), { fin: true });
  report('fragmented', await next());
  ws.close(1000);
  report('close', await next());
}

// No process.exit on success: stdout to a pipe is written asynchronously, and the process
// ends by itself once it is flushed.
main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exitCode = 1;
  ws.terminate();
});
