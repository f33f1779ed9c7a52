// Links between the pages (real hrefs: middle-click opens a tab), keeping the
// page's token on a non-loopback bind.
import { pageToken } from './api/client';

export type Page = 'main' | 'stats' | 'experiment' | 'weights';

export function pageHref(page: Page, params: Record<string, string> = {}): string {
  const q = new URLSearchParams(params);
  if (pageToken) q.set('token', pageToken);
  const query = q.toString();
  return `./${page === 'main' ? '' : page}${query ? `?${query}` : ''}`;
}

export function currentPage(): Page {
  for (const page of ['stats', 'experiment', 'weights'] as const) {
    if (new RegExp(`/${page}/?$`).test(location.pathname)) return page;
  }
  return 'main';
}
