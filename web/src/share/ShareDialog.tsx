// The Share dialog (the top bar's Share): links to hand to someone else,
// each with a Copy button that says when it copied.
// - Playground: on a locked session (a read-only playground), its address.
// - This page: the page's own address with its state (layer, view, phase).
// - Recordings: when the server lists any (list_recordings, read defensively).
// - The library: its PyPI page and install line.
// A link keeps the page's ?token= when it has one: it is what lets the
// receiver in on a non-loopback bind.
import { useEffect, useRef, useState } from 'preact/hooks';
import { pageToken } from '../api/client';
import { Modal } from '../dialogs/Modal';
import { currentPage, pageHref } from '../links';
import { store } from '../state/app';
import { isLocked } from '../state/locked';
import { createStore, useSelector } from '../state/store';
import { LIBRARY } from './library';
import { fetchRecordings, type SharedRecording } from './recordings';

export const shareStore = createStore<{ open: boolean }>({ open: false });

export const openShare = () => shareStore.set({ open: true });

export function ShareDialogHost() {
  const open = useSelector(shareStore, (s) => s.open);
  if (!open) return null;
  return <ShareDialog />;
}

// Past this many cards the main page's link names none (the receiver gets
// the first few, as on any first visit).
const MAX_LINKED_LAYERS = 40;

// The page's address as the receiver should open it: absolute, with the
// page's state: its query (the other pages keep it current), or on the main
// page the cards shown (?layer=a,b).
export function pageLink(): string {
  if (currentPage() === 'main') {
    const { shown } = store.get();
    const params: Record<string, string> = shown.length && shown.length <= MAX_LINKED_LAYERS ? { layer: shown.join(',') } : {};
    return new URL(pageHref('main', params), location.href).href;
  }
  return new URL(location.pathname + location.search, location.origin).href;
}

export function playgroundLink(): string {
  return new URL(pageHref('main'), location.href).href;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/;

function ShareDialog() {
  const locked = useSelector(store, (s) => isLocked(s.status));
  const [recordings, setRecordings] = useState<SharedRecording[] | null>(null);
  const close = () => shareStore.set({ open: false });

  useEffect(() => {
    const ac = new AbortController();
    void fetchRecordings(ac.signal).then((r) => {
      if (!ac.signal.aborted) setRecordings(r);
    });
    return () => ac.abort();
  }, []);

  const local = LOOPBACK.test(location.hostname);
  return (
    <Modal title="Share" testid="share-dialog" onClose={close}>
      {locked && (
        <ShareRow
          id="playground"
          title="Playground"
          link={playgroundLink()}
          note="Anyone with this link can browse this paused session and run experiments; nothing they do changes the run or what others see."
        />
      )}
      <ShareRow
        id="page"
        title="This page"
        link={pageLink()}
        note={
          local
            ? 'Opens this page as it is now (its layer and view). The session is served on this machine only: the link works here, or through an SSH tunnel.'
            : 'Opens this page as it is now (its layer and view).'
        }
      />
      {recordings && recordings.length > 0 && (
        <section class="share-section" data-testid="share-recordings">
          <h3>Recordings</h3>
          {recordings.map((r, i) => (
            <ShareRow
              key={r.link}
              id={`recording-${i}`}
              title={r.label}
              link={r.link}
              note={[r.active ? 'Still recording.' : '', r.kind === 'path' ? 'A file on the machine that runs the training.' : ''].filter(Boolean).join(' ') || undefined}
              small
            />
          ))}
        </section>
      )}
      <ShareRow id="library" title="The library" link={LIBRARY.url} note={`Python: ${LIBRARY.install}`} />
      {pageToken && (
        <p class="form-hint" data-testid="share-token-note">
          These links carry this session’s access token: share them only with people who may use the session.
        </p>
      )}
      <div class="form-actions">
        <button class="btn btn-quiet" data-testid="share-close" onClick={close}>
          Close
        </button>
      </div>
    </Modal>
  );
}

type CopyState = 'idle' | 'copied' | 'failed';
const CONFIRM_MS = 2000;

// Copies through the Clipboard API where the page may use it (a secure
// context: loopback or HTTPS); else by selecting the field and the older
// copy command, which plain-HTTP pages still have.
async function copyText(text: string, field: HTMLInputElement | null): Promise<boolean> {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Refused (permissions): try the selection below.
    }
  }
  if (!field) return false;
  field.focus();
  field.select();
  try {
    return document.execCommand('copy');
  } catch {
    return false;
  }
}

function ShareRow(props: { id: string; title: string; link: string; note?: string; small?: boolean }) {
  const [state, setState] = useState<CopyState>('idle');
  const field = useRef<HTMLInputElement>(null);
  // The confirmation goes back to "Copy" after a moment (display only).
  useEffect(() => {
    if (state === 'idle') return;
    const t = setTimeout(() => setState('idle'), CONFIRM_MS);
    return () => clearTimeout(t);
  }, [state]);
  const copy = () => void copyText(props.link, field.current).then((ok) => setState(ok ? 'copied' : 'failed'));
  const label = state === 'copied' ? 'Copied ✓' : state === 'failed' ? 'Copy failed: press Ctrl+C' : 'Copy';
  const Heading = props.small ? 'h4' : 'h3';
  return (
    <section class="share-section" data-testid={`share-${props.id}`}>
      <Heading>{props.title}</Heading>
      <div class="share-link">
        <input
          ref={field}
          class="mono"
          data-testid={`share-${props.id}-link`}
          readOnly
          value={props.link}
          aria-label={`${props.title} link`}
          onFocus={(e) => e.currentTarget.select()}
        />
        <button
          class={`btn btn-small ${state === 'copied' ? 'btn-copied' : 'btn-quiet'}`}
          data-testid={`share-${props.id}-copy`}
          data-copied={state}
          onClick={copy}
        >
          {label}
        </button>
      </div>
      <span class="sr-only" role="status" aria-live="polite">
        {state === 'copied' ? `${props.title} link copied` : state === 'failed' ? 'The browser refused to copy' : ''}
      </span>
      {props.note && <p class="form-hint">{props.note}</p>}
    </section>
  );
}
