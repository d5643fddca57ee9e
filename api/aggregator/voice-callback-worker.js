// Entry of the voice callbacks' worker thread (voice-callback-thread.ts starts it): a thread has
// its own module loader, so tsx is registered here too before the TypeScript part is imported.
import { register } from 'tsx/esm/api';

register();
await import('./voice-callback-worker.ts');
