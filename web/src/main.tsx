import { render } from 'preact';
import { App } from './App';
import './state/rendered';
import { startDebugWatch } from './state/debug';
import { startSync } from './state/sync';
import './styles/index.css';

render(<App />, document.getElementById('app')!);
startSync();
startDebugWatch();
