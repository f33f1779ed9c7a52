import { render } from 'preact';
import { App } from './App';
import { currentPage } from './links';
import { StatsPage } from './stats/StatsPage';
import './state/rendered';
import { startDebugWatch } from './state/debug';
import { startSync } from './state/sync';
import './styles/index.css';

// One index.html serves every page; the path says which.
render(currentPage() === 'stats' ? <StatsPage /> : <App />, document.getElementById('app')!);
startSync();
startDebugWatch();
