// Entry of signals' item batch thread (api/signals/items.ts starts it): a thread has its own module
// loader, so tsx is registered here too before the TypeScript part is imported.
import { register } from 'tsx/esm/api';

register();
await import('./item-batch-worker.ts');
