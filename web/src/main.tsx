import { render } from 'preact';
import { App } from './App';
import { ExperimentPage } from './experiment/ExperimentPage';
import { currentPage } from './links';
import { StatsPage } from './stats/StatsPage';
import { WeightsPage } from './weights/WeightsPage';
import './state/rendered';
import { startDebugWatch } from './state/debug';
import { startSync } from './state/sync';
import './styles/index.css';

// One index.html serves every page; the path says which.
const page = currentPage();
render(
  page === 'stats' ? <StatsPage /> : page === 'experiment' ? <ExperimentPage /> : page === 'weights' ? <WeightsPage /> : <App />,
  document.getElementById('app')!,
);
startSync();
startDebugWatch();
