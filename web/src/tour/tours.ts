// The guided tours, one per page: each step names the element it points at
// by its data-tour attribute (stable across restyling; a renamed control
// fails tests/browser/tour_test.mjs) and says what it does in one short
// sentence. `only` keeps a step to locked sessions (a playground) or to
// unlocked ones (where the run can be driven).
import type { Page } from '../links';

export interface TourStep {
  target: string;
  text: string;
  only?: 'locked' | 'unlocked';
}

export interface Tour {
  title: string;
  // A target whose appearance means the page has drawn enough to tour
  // (a locked session's tour waits for it before starting by itself).
  ready: string;
  steps: TourStep[];
}

// The last steps of every tour: the top bar's own buttons.
const closing: TourStep[] = [
  { target: 'share', text: 'Share copies a link to this view, the playground, a recording or the library.' },
  { target: 'tour', text: 'Replay this tour at any time with the ? button.' },
];

export const TOURS: Record<Page, Tour> = {
  main: {
    title: 'The layers',
    ready: 'card',
    steps: [
      { target: 'step-controls', text: 'Run, Step and Pause drive the loop; Step’s menu steps a phase, an epoch or further.', only: 'unlocked' },
      { target: 'position', text: 'Where the loop is: epoch, phase and batch.', only: 'unlocked' },
      { target: 'graph', text: 'The network as traced from its forward pass; click a layer to show its card.' },
      { target: 'card', text: 'Each card shows one layer’s activations and gradients for the chosen sample.' },
      { target: 'card-links', text: 'Open the layer’s weights, an experiment on it, or its statistics.' },
      { target: 'input', text: 'The input the cards show; choose another sample of the batch here.' },
      { target: 'probe', text: 'Probes re-run the batch pinned, in eval or train mode, or with edited pixels.', only: 'unlocked' },
      // A locked session's probe is the visitor's own (the server keys it to the browser's cookie).
      { target: 'probe', text: 'Probes re-run this batch in eval or train mode, or with edited pixels; only you see yours.', only: 'locked' },
      { target: 'stats-link', text: 'The Stats page: histograms, Min/Max patches and graphs over the epochs.' },
      { target: 'settings', text: 'Settings: statistics collection, update frequency and error checks.', only: 'unlocked' },
      ...closing,
    ],
  },
  stats: {
    title: 'Statistics',
    ready: 'stats-view',
    steps: [
      { target: 'stats-view', text: 'Choose the view: histograms, Min/Max patches or graphs over time.' },
      { target: 'stats-phase', text: 'Choose the phase the statistics come from, or the current batch.' },
      { target: 'stats-layer', text: 'Choose the layer, or every watched layer at once.' },
      { target: 'stats-axes', text: 'Log scales, and axes that keep their range as new data arrives.' },
      { target: 'stats-cards', text: 'One card per layer, redrawn as statistics come in.' },
      { target: 'back', text: 'Back to the layers.' },
      ...closing,
    ],
  },
  weights: {
    title: 'Weights',
    ready: 'weights-strips',
    steps: [
      { target: 'weights-layer', text: 'Choose the layer whose parameters are shown.' },
      { target: 'weights-dims', text: 'Give each dimension a role: X, Y, tiles, or one fixed index.' },
      { target: 'weights-strips', text: 'The weight, its gradient and the optimizer’s state, on the same axes.' },
      { target: 'weights-scalars', text: 'Scalar optimizer state and live hyperparameters such as the learning rate.' },
      { target: 'weight-graphs', text: 'This layer’s weights over the epochs, on the Stats page.' },
      { target: 'back', text: 'Back to the layers.' },
      ...closing,
    ],
  },
  experiment: {
    title: 'Experiments',
    ready: 'experiment-layer',
    steps: [
      { target: 'experiment-kind', text: 'Choose an experiment: Deep Dream, Grad-CAM or an attribution.' },
      { target: 'experiment-layer', text: 'Choose the layer it runs on; its parameters follow.' },
      { target: 'experiment-buttons', text: 'Run starts the experiment and Cancel stops it; it runs while training is paused.', only: 'unlocked' },
      { target: 'experiment-buttons', text: 'Run starts the experiment and Cancel stops it.', only: 'locked' },
      { target: 'experiment-auto-run', text: 'Auto-run repeats it at every pause and live update.', only: 'unlocked' },
      { target: 'experiment-result', text: 'The result and its progress appear here.' },
      { target: 'back', text: 'Back to the layers.' },
      ...closing,
    ],
  },
};

export function stepsFor(page: Page, locked: boolean): TourStep[] {
  return TOURS[page].steps.filter((s) => !s.only || s.only === (locked ? 'locked' : 'unlocked'));
}
