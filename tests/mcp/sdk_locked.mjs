// The official MCP TypeScript SDK's Streamable HTTP client against a locked,
// parked playground: the status says locked, run control, watching and
// settings come back as tool errors naming the lock and change nothing, an
// experiment still runs, and a probe is the MCP session's own (another
// session sees none). Usage: node sdk_locked.mjs URL
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.argv[2];
const deadline = setTimeout(() => fail('timed out after 120 s'), 120_000);

function fail(message) {
  console.log(`FAIL sdk_locked: ${message}`);
  process.exit(1);
}
function check(condition, message, detail) {
  if (!condition) fail(`${message}${detail === undefined ? '' : ` (got ${JSON.stringify(detail).slice(0, 400)})`}`);
  console.log(`PASS sdk_locked: ${message}`);
}
const json = (result) => JSON.parse(result.content.find((c) => c.type === 'text').text);

try {
  const client = new Client({ name: 'nansense-sdk-locked-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const before = json(await client.callTool({ name: 'get_status', arguments: {} }));
  check(before.locked === true && before.state === 'paused', 'get_status: locked and paused', before);
  check(before.stats.scope === 'all', 'get_status: the stats scope is forced to all', before.stats);

  for (const [name, args] of [
    ['step', {}],
    ['run', {}],
    ['time_travel', { epoch: 0 }],
    ['watch_layers', { layers: ['features.3'] }],
    ['set_stats_scope', { scope: 'watched' }],
    ['configure_debug_checks', { enabled: false }],
    ['cancel_experiment', {}],
  ]) {
    const r = await client.callTool({ name, arguments: args });
    const text = r.content.find((c) => c.type === 'text')?.text ?? '';
    check(r.isError === true && /locked/.test(text), `${name} is refused as locked`, r);
  }
  const after = json(await client.callTool({ name: 'get_status', arguments: {} }));
  check(after.snapshot_sequence === before.snapshot_sequence && after.state === 'paused' &&
        JSON.stringify(after.stats.watched_layers) === JSON.stringify(before.stats.watched_layers),
        'nothing changed', after);

  const ran = await client.callTool({
    name: 'run_experiment',
    arguments: { kind: 'gradcam', layer: 'features.3', params: { batch: 40 }, timeout_seconds: 60 },
  });
  const result = ran.structuredContent ?? json(ran);
  check(!ran.isError && result.stage === 'done', 'run_experiment runs on the locked session', result);
  check(JSON.stringify(result.clamped_params) === '["batch"]' && result.params.batch === 8,
        'its batch was clamped to 8', result);

  // Each MCP session is a visitor of its own: its probe shows to it alone.
  const other = new Client({ name: 'nansense-sdk-locked-test-2', version: '1.0.0' });
  await other.connect(new StreamableHTTPClientTransport(new URL(url)));
  const probed = await client.callTool({ name: 'set_probe_mode', arguments: { mode: 'eval', timeout_seconds: 30 } });
  const probe = probed.structuredContent ?? json(probed);
  check(!probed.isError && probe.active === true && probe.mode === 'eval', 'set_probe_mode applies to this session', probe);
  const own = json(await client.callTool({ name: 'get_status', arguments: {} }));
  check(own.probe.active === true && own.snapshot_sequence !== before.snapshot_sequence,
        'this session is shown its own probe run', own.probe);
  const seen = json(await other.callTool({ name: 'get_status', arguments: {} }));
  check(seen.probe.active === false && seen.snapshot_sequence === before.snapshot_sequence,
        'another MCP session sees no probe and the same snapshot', seen.probe);
  await other.close();
  await client.close();
  clearTimeout(deadline);
} catch (e) {
  fail(e.stack ?? String(e));
}
