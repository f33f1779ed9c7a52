// Where the server serves each command the page uses, by the server's command
// names (checked against its command table by tests/wire/check_types.sh).
export const routes = {
  get_status: { method: 'GET', path: '/api/status' },
  get_architecture: { method: 'GET', path: '/api/architecture' },
  get_snapshot: { method: 'GET', path: '/api/snapshot' },
  step: { method: 'POST', path: '/api/step' },
  run: { method: 'POST', path: '/api/run' },
  pause: { method: 'POST', path: '/api/pause' },
  run_until: { method: 'POST', path: '/api/run_until' },
  get_time_travel_status: { method: 'GET', path: '/api/time_travel' },
  time_travel: { method: 'POST', path: '/api/time_travel' },
  get_debug_report: { method: 'GET', path: '/api/debug' },
  configure_debug_checks: { method: 'POST', path: '/api/debug/settings' },
  silence_debug_check: { method: 'POST', path: '/api/debug/silence' },
  clear_debug_error: { method: 'POST', path: '/api/debug/clear' },
  choose_update: { method: 'POST', path: '/api/debug/choose_update' },
  render_strip: { method: 'GET', path: '/api/render/strip' },
  render_input: { method: 'GET', path: '/api/render/input' },
  refresh: { method: 'POST', path: '/api/refresh' },
  get_settings: { method: 'GET', path: '/api/settings' },
  set_update_frequency: { method: 'POST', path: '/api/settings/update_frequency' },
  set_stats_scope: { method: 'POST', path: '/api/stats/scope' },
  watch_layers: { method: 'POST', path: '/api/stats/watch' },
  unwatch_layers: { method: 'POST', path: '/api/stats/unwatch' },
  set_watch_performance: { method: 'POST', path: '/api/stats/performance' },
  list_stats: { method: 'GET', path: '/api/stats' },
  get_stats_history: { method: 'GET', path: '/api/stats/history' },
  get_current_stats: { method: 'GET', path: '/api/stats/current' },
  get_metrics: { method: 'GET', path: '/api/metrics' },
} as const;

export type Routes = typeof routes;
