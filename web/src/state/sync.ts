// Keeps the store in step with the server: the push channel carries status and
// "snapshot ready" events, and the JSON views are refetched when they change.
import { ApiError, getArchitecture, getSnapshot, getStatus } from '../api/client';
import { connectPush } from '../api/push';
import type { PushMessage, Status } from '../api/types';
import { expectStrips, pushClosed, pushOpened, receiveStrip, stripsDone } from '../cards/stripPush';
import { addressLayers, requestFocus, setSample, shownFor, store, toast } from './app';
import { experimentPushed } from './experiments';

// Sequences restart with the server, so everything fetched is tagged with the
// connection generation it was asked for in, and stale answers are dropped.
let snapshotWanted = 0;
let snapshotInFlight = 0;
let snapshotGeneration = -1;
let architectureInFlight: Promise<void> | null = null;

// Status from a push, a command's reply or a fetch; a newer snapshot
// sequence in it pulls the snapshot JSON.
export function applyStatus(status: Status): void {
  const newer = status.snapshot_sequence > store.get().sequence;
  // Before the cards hear of it: they then wait for the pushed pictures.
  if (newer) expectStrips(store.get().generation, status.snapshot_sequence);
  store.set(newer ? { status, sequence: status.snapshot_sequence, announcedBatchSize: null } : { status });
  if (status.snapshot_sequence > 0) wantSnapshot(status.snapshot_sequence);
}

function wantSnapshot(sequence: number): void {
  snapshotWanted = Math.max(snapshotWanted, sequence);
  const { generation, snapshot } = store.get();
  const loaded = snapshotGeneration === generation ? (snapshot?.sequence ?? 0) : 0;
  if (loaded >= snapshotWanted || snapshotInFlight >= snapshotWanted) return;
  void fetchSnapshot();
}

async function fetchSnapshot(): Promise<void> {
  const generation = store.get().generation;
  snapshotInFlight = snapshotWanted;
  try {
    const snapshot = await getSnapshot();
    if (generation !== store.get().generation) return;
    if (snapshotGeneration === generation && snapshot.sequence < (store.get().snapshot?.sequence ?? 0)) return;
    snapshotGeneration = generation;
    const arch = store.get().architecture;
    store.set((s) => ({ snapshot, sequence: Math.max(s.sequence, snapshot.sequence) }));
    setSample(store.get().sample);
    if (!arch?.captured) await refreshArchitecture();
  } catch (e) {
    // 404 before the first capture is normal; the next status retries.
    if (!(e instanceof ApiError && e.status === 404)) reportFetchError('snapshot', e);
  } finally {
    const requested = snapshotInFlight;
    snapshotInFlight = 0;
    if (generation === store.get().generation && snapshotWanted > requested) wantSnapshot(snapshotWanted);
  }
}

export function refreshArchitecture(): Promise<void> {
  architectureInFlight ??= (async () => {
    try {
      const architecture = await getArchitecture();
      const { architecture: previous, shown, showShapeOps } = store.get();
      const next = architecture.captured ? shownFor(architecture, previous, shown, showShapeOps) : shown;
      store.set({ architecture, shown: next });
      // A shared link's first layer: brought into view in both panes.
      const asked = architecture.captured && !previous?.captured ? addressLayers().find((l) => next.includes(l)) : undefined;
      if (asked) requestFocus(asked, 'both');
    } catch (e) {
      reportFetchError('architecture', e);
    } finally {
      architectureInFlight = null;
    }
  })();
  return architectureInFlight;
}

function reportFetchError(what: string, e: unknown): void {
  // A fetch cut by a server restart is reported by the connection indicator.
  if (e instanceof ApiError) toast(`Could not load the ${what}: ${e.message}`);
}

// Statuses pushed so far. A fetched status is older than any status pushed
// while it was in flight, and must not overwrite it.
let pushedStatuses = 0;

async function refreshAll(): Promise<void> {
  const before = pushedStatuses;
  try {
    const status = await getStatus();
    if (pushedStatuses === before) applyStatus(status);
  } catch (e) {
    reportFetchError('status', e);
  }
  await refreshArchitecture();
}

function onMessage(message: PushMessage): void {
  if (message.type === 'status') {
    pushedStatuses += 1;
    applyStatus(message.status);
  } else if (message.type === 'snapshot') {
    // The status carrying this sequence usually came just before.
    const { sequence, announcedBatchSize, generation } = store.get();
    if (message.sequence >= sequence) {
      expectStrips(generation, message.sequence);
      const known = message.sequence === sequence ? announcedBatchSize : null;
      const held = message.samples_kept ?? message.batch_size;
      store.set({ sequence: message.sequence, announcedBatchSize: held ?? known });
      setSample(store.get().sample);
    }
    if (message.architecture_changed) void refreshArchitecture();
    wantSnapshot(message.sequence);
  } else if (message.type === 'strips_done') {
    stripsDone(message.sequence, message.failed ?? []);
  } else if (message.type === 'experiment') {
    experimentPushed(message.result);
  } else if (message.type === 'error') {
    // A message this page sent was refused: a bug here, not the user's doing.
    console.warn(`nansense server: ${message.message}`);
  }
}

export function startSync(): () => void {
  // Don't make the first paint wait for the socket's handshake.
  void refreshAll();
  return connectPush({
    onOpen() {
      snapshotWanted = 0;
      snapshotInFlight = 0;
      store.set((s) => ({ connection: 'open', generation: s.generation + 1, sequence: 0 }));
      pushOpened(store.get().generation);
      // Events sent while the link was down are lost: start from the views.
      void refreshAll();
    },
    onClose() {
      pushClosed();
      if (store.get().connection !== 'closed') store.set({ connection: 'closed' });
    },
    onMessage,
    onStrip: receiveStrip,
  });
}
