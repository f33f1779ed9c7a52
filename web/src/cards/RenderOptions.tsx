// How strips are drawn: every channel or their average, and the values as
// they are or as magnitudes (abs / square, on a sequential scale).
import type { Values } from '../api/types';
import { FIXED_BY_RECORDING, mainRecording, setRenderOptions, store } from '../state/app';
import { useSelector } from '../state/store';

export function RenderOptions() {
  const average = useSelector(store, (s) => s.average);
  const values = useSelector(store, (s) => s.values);
  // The main page's recording draws its frames with these options.
  const recording = useSelector(store, mainRecording);
  const fixed = recording ? FIXED_BY_RECORDING : null;
  return (
    <div class="render-options" data-testid="render-options" data-fixed={recording}>
      <label class="switch" title={fixed ?? 'Collapse each strip to the mean over its channels'}>
        <input
          type="checkbox"
          disabled={recording}
          data-testid="average-toggle"
          checked={average}
          onChange={(e) => setRenderOptions({ average: e.currentTarget.checked })}
        />
        <span class="switch-track" aria-hidden="true" />
        Channel average
      </label>
      <label class="field-inline" title={fixed ?? 'Transform values before drawing (and before averaging)'}>
        Values
        <select
          disabled={recording}
          data-testid="values-select"
          value={values}
          onChange={(e) => setRenderOptions({ values: e.currentTarget.value as Values })}
        >
          <option value="unchanged">unchanged</option>
          <option value="abs">abs</option>
          <option value="square">square</option>
        </select>
      </label>
    </div>
  );
}
