// The main page: top bar and banners over three panes.
import { CardsPane } from './cards/CardsPane';
import { ConfirmLastBatch } from './dialogs/ConfirmLastBatch';
import { CustomStepDialogHost } from './dialogs/CustomStepDialog';
import { DebugDialogHost } from './dialogs/DebugDialog';
import { DebugSettingsHost } from './dialogs/DebugSettingsDialog';
import { TimeTravelDialogHost } from './dialogs/TimeTravelDialog';
import { Toasts } from './dialogs/Toasts';
import { ShareDialogHost } from './share/ShareDialog';
import { TourHost } from './tour/Tour';
import { GraphPane } from './graph/GraphPane';
import { InputPane } from './input/InputPane';
import { Panes } from './layout/Panes';
import { store } from './state/app';
import { useSelector } from './state/store';
import { Banners } from './topbar/Banners';
import { TopBar } from './topbar/TopBar';

export function App() {
  const panes = useSelector(store, (s) => s.panes);
  return (
    <div class="app">
      <TopBar page="main" />
      <Banners />
      <Panes
        left={<GraphPane />}
        centre={<CardsPane />}
        right={<InputPane />}
        leftShown={panes.architecture}
        rightShown={panes.input}
      />
      <Dialogs />
    </div>
  );
}

// The dialogs the top bar and banners open, on every page.
export function Dialogs() {
  return (
    <>
      <CustomStepDialogHost />
      <ConfirmLastBatch />
      <DebugDialogHost />
      <DebugSettingsHost />
      <TimeTravelDialogHost />
      <ShareDialogHost />
      <Toasts />
      <TourHost />
    </>
  );
}
