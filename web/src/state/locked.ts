// Whether the session is locked (a read-only playground): the status's
// `locked` field, read defensively. A server that predates lock() sends no
// such field, which means unlocked.
import type { Status } from '../api/types';

export function isLocked(status: Status | null | undefined): boolean {
  return (status as { locked?: unknown } | null | undefined)?.locked === true;
}
