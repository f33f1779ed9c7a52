// The Share dialog (the top bar's Share): three targets to hand to someone
// else, each with a preview, its link with a Copy button, and buttons that
// post the link on X, Facebook, LinkedIn, Reddit, Hacker News or by email.
// - This page (on a locked session: the Playground): its address with the
//   page's state, previewed live in a zoomed-out frame (a locked session is
//   usually itself framed by the docs page, so it gets a note instead).
// - Video: a recording saved in this run (Settings → Recording), played
//   here and downloadable (get_recording_file); those still being written
//   are named, to be shared once saved.
// - Library: its PyPI page and install line.
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
import { fetchVideos, type SharedVideo } from './recordings';

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

type Target = 'page' | 'video' | 'library';

// Where each platform takes a link and a line of text.
export const PLATFORMS: { id: string; name: string; href: (link: string, text: string) => string }[] = [
  { id: 'x', name: 'X', href: (l, t) => `https://x.com/intent/tweet?${new URLSearchParams({ text: t, url: l })}` },
  { id: 'facebook', name: 'Facebook', href: (l) => `https://www.facebook.com/sharer/sharer.php?${new URLSearchParams({ u: l })}` },
  { id: 'linkedin', name: 'LinkedIn', href: (l) => `https://www.linkedin.com/sharing/share-offsite/?${new URLSearchParams({ url: l })}` },
  { id: 'reddit', name: 'Reddit', href: (l, t) => `https://www.reddit.com/submit?${new URLSearchParams({ url: l, title: t })}` },
  { id: 'hn', name: 'Hacker News', href: (l, t) => `https://news.ycombinator.com/submitlink?${new URLSearchParams({ u: l, t })}` },
  {
    id: 'email',
    name: 'Email',
    href: (l, t) => `mailto:?subject=${encodeURIComponent(t)}&body=${encodeURIComponent(`${t}\n${l}`)}`,
  },
];

function ShareDialog() {
  const locked = useSelector(store, (s) => isLocked(s.status));
  const [target, setTarget] = useState<Target>('page');
  const [videos, setVideos] = useState<{ videos: SharedVideo[] } | { error: string } | null>(null);
  const [chosen, setChosen] = useState<string | null>(null);
  const close = () => shareStore.set({ open: false });

  useEffect(() => {
    const ac = new AbortController();
    void fetchVideos(ac.signal).then((r) => {
      if (!ac.signal.aborted) setVideos(r);
    });
    return () => ac.abort();
  }, []);

  const local = LOOPBACK.test(location.hostname);
  const page = locked
    ? {
        id: 'playground',
        title: 'Playground',
        link: playgroundLink(),
        text: 'A paused model to explore in nansense, the PyTorch training debugger',
        note: 'Anyone with this link can browse this paused session and run experiments; nothing they do changes the run or what others see.',
      }
    : {
        id: 'page',
        title: 'This page',
        link: pageLink(),
        text: 'A training run, live in nansense',
        note: local
          ? 'Opens this page as it is now (its layer and view). The session is served on this machine only: the link works here, or through an SSH tunnel.'
          : 'Opens this page as it is now (its layer and view).',
      };
  const list = videos && 'videos' in videos ? videos.videos : [];
  const video = list.find((v) => v.path === chosen) ?? list[0] ?? null;

  const tabs: { id: Target; label: string }[] = [
    { id: 'page', label: page.title },
    { id: 'video', label: 'Video' },
    { id: 'library', label: 'Library' },
  ];
  return (
    <Modal title="Share" testid="share-dialog" onClose={close}>
      <div class="share-targets" role="tablist" aria-label="What to share">
        {tabs.map((t) => (
          <button
            key={t.id}
            role="tab"
            class={`share-target ${target === t.id ? 'share-target-on' : ''}`}
            aria-selected={target === t.id}
            data-testid={`share-target-${t.id}`}
            onClick={() => setTarget(t.id)}
          >
            {t.label}
          </button>
        ))}
      </div>
      <div class="share-preview" data-testid="share-preview" data-target={target}>
        {target === 'page' &&
          (locked ? (
            <p class="share-preview-note" data-testid="share-preview-note">
              The playground opens as you see it here, paused at its frozen moment.
            </p>
          ) : (
            <div class="share-frame-box">
              <iframe class="share-frame" data-testid="share-preview-frame" src={page.link} title="Preview of the shared page" tabIndex={-1} />
            </div>
          ))}
        {target === 'video' && <VideoPreview videos={videos} video={video} />}
        {target === 'library' && (
          <div class="share-library" data-testid="share-library-preview">
            <b>{LIBRARY.name}</b>: a debugger for PyTorch training loops: pause, step and rewind the loop, see every layer, catch
            a NaN at the op that made it.
            <code class="mono">{LIBRARY.install}</code>
          </div>
        )}
      </div>
      {target === 'page' && <ShareRow id={page.id} title={page.title} link={page.link} text={page.text} note={page.note} />}
      {target === 'video' && list.length > 1 && (
        <label class="form-row">
          <span>Recording</span>
          <select data-testid="share-video-select" value={video?.path} onChange={(e) => setChosen(e.currentTarget.value)}>
            {list.map((v) => (
              <option key={v.path} value={v.path}>
                {v.label}
                {v.url ? '' : ' (still recording)'} — {v.path.split('/').pop()}
              </option>
            ))}
          </select>
        </label>
      )}
      {target === 'video' && video?.url && (
        <ShareRow
          id="video"
          title={video.label}
          link={video.url}
          text={`A training run recorded by nansense: ${video.label}`}
          note={local ? 'Served by this session, on this machine only: download it to share the file itself.' : undefined}
        />
      )}
      {target === 'library' && (
        <ShareRow
          id="library"
          title="The library"
          link={LIBRARY.url}
          text="nansense: a debugger for PyTorch training loops"
          note={`Python: ${LIBRARY.install}`}
        />
      )}
      {pageToken && target !== 'library' && (
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

// The chosen recording playing, with its Download; or why there is none.
function VideoPreview({ videos, video }: { videos: { videos: SharedVideo[] } | { error: string } | null; video: SharedVideo | null }) {
  if (!videos) return <p class="share-preview-note">Looking for recordings…</p>;
  if ('error' in videos) {
    return (
      <p class="share-preview-note error-text" data-testid="share-video-error">
        The recordings could not be listed: {videos.error}
      </p>
    );
  }
  if (!video) {
    return (
      <p class="share-preview-note" data-testid="share-video-none">
        No recording yet: Settings → Recording → Record makes a video of the view you are on; Save &amp; Finish it to share it here.
      </p>
    );
  }
  if (!video.url || !video.download) {
    return (
      <p class="share-preview-note" data-testid="share-video-active">
        {video.label} is still recording: Save &amp; Finish it (Settings → Recording) to play and share it.
      </p>
    );
  }
  const name = video.path.split('/').pop() ?? 'recording.mp4';
  return (
    <div class="share-video-box">
      <video class="share-video" data-testid="share-video-player" src={video.url} controls preload="metadata" key={video.url} />
      <a class="btn btn-small btn-quiet share-download" data-testid="share-video-download" href={video.download} download={name}>
        Download
      </a>
    </div>
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

function ShareRow(props: { id: string; title: string; link: string; text: string; note?: string }) {
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
  return (
    <section class="share-section" data-testid={`share-${props.id}`}>
      <h3>{props.title}</h3>
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
      <div class="share-platforms" data-testid={`share-${props.id}-platforms`}>
        {PLATFORMS.map((p) => (
          <a
            key={p.id}
            class="btn btn-small btn-quiet"
            data-testid={`share-${props.id}-on-${p.id}`}
            href={p.href(props.link, props.text)}
            target="_blank"
            rel="noopener noreferrer"
            title={`Share the link on ${p.name}`}
          >
            {p.name}
          </a>
        ))}
      </div>
      {props.note && <p class="form-hint">{props.note}</p>}
    </section>
  );
}
