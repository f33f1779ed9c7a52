// A native modal <dialog>: focus trap, Escape and the backdrop for free.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

interface Props {
  title: string;
  testid: string;
  onClose(): void;
  children: ComponentChildren;
  // Room for tables.
  wide?: boolean;
}

export function Modal({ title, testid, onClose, children, wide }: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);
  return (
    <dialog
      ref={ref}
      class="modal"
      data-testid={testid}
      aria-label={title}
      onCancel={(e) => {
        e.preventDefault();
        onClose();
      }}
      onClick={(e) => {
        // A press on the backdrop lands on the <dialog> itself.
        if (e.target === ref.current) onClose();
      }}
    >
      <div class={wide ? 'modal-body modal-wide' : 'modal-body'}>
        <h2 class="modal-title">{title}</h2>
        {children}
      </div>
    </dialog>
  );
}
