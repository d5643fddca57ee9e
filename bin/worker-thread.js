// Entry of the worker thread of `ldp start` (bin/platform.ts, startWorkerThread): a thread has
// its own module loader, so tsx is registered here too before the TypeScript part is imported.
import { register } from 'tsx/esm/api';

register();
await import('./worker-thread.ts');
