#!/usr/bin/env node
// The `ldp` command. The project runs its TypeScript directly through tsx: no build step.
import { register } from 'tsx/esm/api';

register();
await import('./cli.ts');
