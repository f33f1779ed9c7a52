// The Experiment page's state, step by step: the kind and layer (kept in the
// address), the kinds this server offers, the layer switched to one the kind
// can use, and running the experiment (by the button, or registered for
// auto-run).
import { useEffect, useState } from 'preact/hooks';
import { listExperiments, runExperiment } from '../api/client';
import type { Architecture, ExperimentKind, ExperimentKindName, ExperimentList } from '../api/types';
import { pageHref } from '../links';
import { experimentForm } from '../state/experiments';
import { paramsOf, type Values } from './params';
import { useAutoExperiment } from './useAutoExperiment';
import type { ShownRun } from './useShownRun';

type SetMessage = (message: string | null) => void;

export interface ExperimentAddress {
  kindName: string;
  setKindName: (kind: string) => void;
  layer: string;
  setLayer: (layer: string) => void;
}

// The address keeps the layer and kind, so a reload or a shared link opens the same.
export function useExperimentAddress(): ExperimentAddress {
  const [kindName, setKindName] = useState(() => new URLSearchParams(location.search).get('kind') ?? 'gradcam');
  const [layer, setLayer] = useState(() => new URLSearchParams(location.search).get('layer') ?? '');
  useEffect(() => {
    const params: Record<string, string> = {};
    if (layer) params.layer = layer;
    if (kindName !== 'gradcam') params.kind = kindName;
    history.replaceState(null, '', pageHref('experiment', params));
  }, [layer, kindName]);
  return { kindName, setKindName, layer, setLayer };
}

// The kinds and their layers follow the architecture (known after the first capture).
export function useExperimentList(architecture: Architecture | null, sequence: number, setError: SetMessage) {
  const [list, setList] = useState<ExperimentList | null>(null);
  useEffect(() => {
    const ac = new AbortController();
    listExperiments(ac.signal)
      .then(setList)
      .catch((e: Error) => e.name !== 'AbortError' && setError(e.message));
    return () => ac.abort();
  }, [architecture, sequence]);
  return { list, setList };
}

// The kind chosen; one from the address that this server does not offer
// becomes its first one.
export function useOfferedKind(list: ExperimentList | null, address: ExperimentAddress): ExperimentKind | undefined {
  const { kindName, setKindName } = address;
  const kind = list?.kinds.find((k) => k.kind === kindName);
  useEffect(() => {
    if (list && !list.kinds.some((k) => k.kind === kindName) && list.kinds[0]) setKindName(list.kinds[0].kind);
  }, [list, kindName]);
  return kind;
}

// A layer the kind cannot use switches to the first it can, with a notice.
export function useUsableLayer(kind: ExperimentKind | undefined, address: ExperimentAddress, setNotice: SetMessage): void {
  const { layer, setLayer } = address;
  const usable = kind?.layers ?? [];
  useEffect(() => {
    if (!kind || usable.length === 0 || usable.includes(layer)) return;
    if (layer) setNotice(`${kind.title} cannot use ${layer}; switched to ${usable[0]}.`);
    setLayer(usable[0]);
  }, [kind, layer, usable.join(',')]);
}

export interface RunInputs {
  kind: ExperimentKind | undefined;
  // The kind's values as the form shows them (defaults under the typed ones).
  kindValues: Values;
  layer: string;
  autoRun: boolean;
  shown: ShownRun;
  setError: SetMessage;
  setNotice: SetMessage;
}

// Run (the button): sends the form if its numbers are numbers and shows the
// run. With auto-run, the same request is registered again whenever it changes.
export function useExperimentRun({ kind, kindValues, layer, autoRun, shown, setError, setNotice }: RunInputs): () => Promise<void> {
  const checkedParams = () => {
    if (!kind) return null;
    const { params, missing } = paramsOf(kind, kindValues);
    if (missing.length > 0) {
      setError(`Enter a number for: ${missing.join(', ')}`);
      return null;
    }
    return params;
  };

  const run = async () => {
    const params = checkedParams();
    if (!kind || !params) return;
    setError(null);
    setNotice(null);
    try {
      const r = await runExperiment(kind.kind as ExperimentKindName, layer, params);
      if (r.ignored_params && r.ignored_params.length > 0) setNotice(`Ignored: ${r.ignored_params.join(', ')}`);
      shown.start(r);
    } catch (e) {
      setError((e as Error).message);
    }
  };

  usePublishedForm(kind, kindValues, layer);
  const autoKey = autoRun && kind && layer ? JSON.stringify([kind.kind, layer, paramsOf(kind, kindValues)]) : '';
  useAutoExperiment(
    autoRun,
    autoKey,
    () => {
      const params = checkedParams();
      return kind && params ? { kind: kind.kind as ExperimentKindName, layer, params } : null;
    },
    shown,
    setError,
  );
  return run;
}

// The form as the gear's Recording section records it (null while a number
// is missing, and once the page is gone).
function usePublishedForm(kind: ExperimentKind | undefined, kindValues: Values, layer: string): void {
  const formKey = kind && layer ? JSON.stringify([kind.kind, layer, paramsOf(kind, kindValues)]) : '';
  useEffect(() => {
    const form = kind && layer ? paramsOf(kind, kindValues) : null;
    experimentForm.set({
      form: kind && form && form.missing.length === 0 ? { kind: kind.kind as ExperimentKindName, layer, params: form.params } : null,
    });
  }, [formKey]);
  useEffect(() => () => experimentForm.set({ form: null }), []);
}
