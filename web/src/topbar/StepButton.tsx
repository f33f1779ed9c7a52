// Step Batch as a split button: the face steps one batch, the caret opens
// the coarser steps and the custom target dialog.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { StepUnit } from '../api/types';
import { store } from '../state/app';
import { useDismiss } from '../ui/useDismiss';

interface Props {
  enabled: boolean;
  onStep(unit: StepUnit): void;
}

export function StepButton({ enabled, onStep }: Props) {
  const [open, setOpen] = useState(false);
  const ref = useRef<HTMLDivElement>(null);
  const close = useCallback(() => setOpen(false), []);
  useDismiss(ref, open, close);
  // A menu left open while stepping was impossible must not pop up later.
  useEffect(() => {
    if (!enabled) setOpen(false);
  }, [enabled]);

  const pick = (action: () => void) => () => {
    setOpen(false);
    action();
  };

  return (
    <div class="split menu-anchor" ref={ref}>
      <button class="btn btn-step split-main" data-testid="step" disabled={!enabled} onClick={() => onStep('batch')} title="Run one batch and pause">
        <svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true">
          <path fill="currentColor" d="M5 5v14l9-7zM16 5h3v14h-3z" />
        </svg>
        Step Batch
      </button>
      <button
        class="btn btn-step split-caret"
        data-testid="step-menu"
        disabled={!enabled}
        aria-haspopup="menu"
        aria-expanded={open}
        aria-label="More step options"
        onClick={() => setOpen(!open)}
      >
        ▾
      </button>
      {open && enabled && (
        <div class="popover step-menu" role="menu">
          <button class="menu-item" role="menuitem" data-testid="step-phase" onClick={pick(() => onStep('phase'))}>
            Step phase
            <span class="menu-hint">to the next phase's first batch</span>
          </button>
          <button class="menu-item" role="menuitem" data-testid="step-epoch" onClick={pick(() => onStep('epoch'))}>
            Step epoch
            <span class="menu-hint">to the next epoch's first batch</span>
          </button>
          <button
            class="menu-item"
            role="menuitem"
            data-testid="step-custom"
            onClick={pick(() => store.set({ customDialogOpen: true }))}
          >
            Step custom…
            <span class="menu-hint">to an epoch, phase and batch</span>
          </button>
        </div>
      )}
    </div>
  );
}
