// The server's push channel (/ws): status and snapshot events, and the
// pictures of the strips the page watches (binary frames). Reconnects by
// itself; the caller refetches everything on each (re)connect because events
// sent while the link was down are gone.
import { pageToken } from './client';
import type { StripInfo, PushMessage } from './types';

export interface PushHandlers {
  onOpen(): void;
  onClose(): void;
  onMessage(message: PushMessage): void;
  // A pushed strip: its render info and PNG bytes.
  onStrip(info: StripInfo, png: Uint8Array): void;
}

let openSocket: WebSocket | null = null;

// Sends a message to the server over the open channel; false when there is
// none (the message is then the caller's to send again on the next open).
export function sendPush(message: object): boolean {
  if (!openSocket || openSocket.readyState !== WebSocket.OPEN) return false;
  openSocket.send(JSON.stringify(message));
  return true;
}

// A binary frame: a 4-byte big-endian header length, the header (JSON), then
// the PNG. Anything else is ignored.
function parseStrip(data: ArrayBuffer): { info: StripInfo; png: Uint8Array } | null {
  if (data.byteLength < 4) return null;
  const length = new DataView(data).getUint32(0, false);
  if (4 + length > data.byteLength) return null;
  try {
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(data, 4, length))) as StripInfo & {
      type?: string;
    };
    if (header.type !== 'strip') return null;
    return { info: header, png: new Uint8Array(data, 4 + length) };
  } catch {
    return null;
  }
}

const FIRST_RETRY_MS = 100;
// The contract: never more than 2 s between tries, so a restarted server is
// picked up quickly.
const MAX_RETRY_MS = 2000;

export function pushUrl(): string {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const query = pageToken ? `?token=${encodeURIComponent(pageToken)}` : '';
  return `${scheme}//${location.host}/ws${query}`;
}

export function connectPush(handlers: PushHandlers): () => void {
  let socket: WebSocket | null = null;
  let retryMs = FIRST_RETRY_MS;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;

  const open = () => {
    timer = undefined;
    const ws = new WebSocket(pushUrl());
    ws.binaryType = 'arraybuffer';
    socket = ws;
    ws.onopen = () => {
      retryMs = FIRST_RETRY_MS;
      openSocket = ws;
      handlers.onOpen();
    };
    ws.onmessage = (event) => {
      if (event.data instanceof ArrayBuffer) {
        const strip = parseStrip(event.data);
        if (strip) handlers.onStrip(strip.info, strip.png);
        return;
      }
      if (typeof event.data !== 'string') return;
      let message: PushMessage;
      try {
        message = JSON.parse(event.data) as PushMessage;
      } catch {
        return;
      }
      handlers.onMessage(message);
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      socket = null;
      if (openSocket === ws) openSocket = null;
      // Also after a failed first try: the page is offline either way.
      handlers.onClose();
      if (stopped) return;
      timer = setTimeout(open, retryMs);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    };
  };

  // A laptop waking up or a tab coming back should not wait out the backoff.
  const retryNow = () => {
    if (stopped || socket || timer === undefined) return;
    clearTimeout(timer);
    retryMs = FIRST_RETRY_MS;
    open();
  };
  window.addEventListener('online', retryNow);
  document.addEventListener('visibilitychange', retryNow);

  open();
  return () => {
    stopped = true;
    window.removeEventListener('online', retryNow);
    document.removeEventListener('visibilitychange', retryNow);
    if (timer !== undefined) clearTimeout(timer);
    socket?.close();
  };
}
