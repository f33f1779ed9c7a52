// The server's push channel (/ws): status and snapshot events. Reconnects by
// itself; the caller refetches everything on each (re)connect because events
// sent while the link was down are gone.
import { pageToken } from './client';
import type { PushMessage } from './types';

export interface PushHandlers {
  onOpen(): void;
  onClose(): void;
  onMessage(message: PushMessage): void;
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
    socket = ws;
    ws.onopen = () => {
      retryMs = FIRST_RETRY_MS;
      handlers.onOpen();
    };
    ws.onmessage = (event) => {
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
