// Auto-run (the session's setting): the page registers its experiment under
// this tab's name and renews it every second; the server re-runs it at every
// snapshot and its results come over the push channel. Other tabs' runs are
// theirs: registering never cancels them. Leaving the page (or turning
// auto-run off) forgets the registration.
import { useEffect } from 'preact/hooks';
import { clearAutoExperiment, setAutoExperiment } from '../api/client';
import type { ExperimentKindName } from '../api/types';
import { latestPushed, tabId } from '../state/experiments';
import type { ShownRun } from './useShownRun';

// Heartbeat of the page's auto experiment: the server forgets it 5 s after
// the last one.
const RENEW_MS = 1000;

export interface AutoRequest {
  kind: ExperimentKindName;
  layer: string;
  params: Record<string, unknown>;
}

// `request`: what to register (null: nothing, auto-run is off or the form is
// incomplete); `key` changes exactly when the request does.
export function useAutoExperiment(
  autoRun: boolean,
  key: string,
  request: () => AutoRequest | null,
  shown: ShownRun,
  setError: (message: string | null) => void,
): void {
  useEffect(() => {
    if (!key) return;
    const asked = request();
    if (!asked) return;
    let stopped = false;
    const register = (first: boolean) =>
      setAutoExperiment(tabId, asked.kind, asked.layer, asked.params)
        .then((reply) => {
          if (stopped) return;
          if (first) setError(null);
          if (reply.seq > shown.followed.current) {
            const pushed = latestPushed(reply.seq);
            if (pushed) shown.show(pushed);
            else shown.followed.current = reply.seq;
          }
        })
        .catch((e: Error) => !stopped && setError(e.message));
    void register(true);
    const timer = setInterval(() => void register(false), RENEW_MS);
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }, [key]);

  useEffect(() => {
    if (!autoRun) return;
    const leave = () => void clearAutoExperiment(tabId, true).catch(() => undefined);
    window.addEventListener('pagehide', leave);
    return () => {
      window.removeEventListener('pagehide', leave);
      leave();
    };
  }, [autoRun]);
}
