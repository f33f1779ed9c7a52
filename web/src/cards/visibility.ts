// One IntersectionObserver for every strip in the cards pane: a strip loads
// its image only while it is in or near the scrolled view.
import { createContext } from 'preact';

type Callback = (visible: boolean) => void;

// How far outside the view a strip starts loading, so scrolling finds
// images ready.
const PRELOAD_MARGIN = '400px 0px';

export class Visibility {
  private observer: IntersectionObserver | null = null;
  private readonly callbacks = new Map<Element, Callback>();

  // The scroller is known only after the pane mounts, possibly after its
  // strips asked to be observed; those wait here until then.
  setRoot(root: Element | null): void {
    this.observer?.disconnect();
    this.observer = null;
    if (!root) return;
    this.observer = new IntersectionObserver(
      (entries) => {
        for (const e of entries) this.callbacks.get(e.target)?.(e.isIntersecting);
      },
      { root, rootMargin: PRELOAD_MARGIN },
    );
    for (const el of this.callbacks.keys()) this.observer.observe(el);
  }

  observe(el: Element, callback: Callback): () => void {
    this.callbacks.set(el, callback);
    this.observer?.observe(el);
    return () => {
      this.callbacks.delete(el);
      this.observer?.unobserve(el);
    };
  }
}

export const VisibilityContext = createContext<Visibility | null>(null);
