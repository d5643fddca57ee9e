/**
 * The layout's rules as code (`npm run lint:deps`): ../shared/DESIGN.md, "Layout", and
 * docs/decisions.md, "Code layout". Each rule's comment is what a failing check prints.
 */
const SERVICES = ['signals', 'search', 'aggregator'];

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Import circles make modules impossible to read or load on their own: move the shared part into a module both import.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'platform-knows-no-domain',
      severity: 'error',
      comment: 'lib/platform/ is what any service runs on: it imports no other part of lib/.',
      from: { path: '^lib/platform/' },
      to: { path: '^lib/', pathNot: '^lib/platform/' },
    },
    {
      name: 'network-imports-only-platform',
      severity: 'error',
      comment: 'lib/network/ (the shared model) imports only lib/platform/.',
      from: { path: '^lib/network/' },
      to: { path: '^lib/', pathNot: '^lib/(network|platform)/' },
    },
    ...SERVICES.map((service) => ({
      name: `${service}-never-imports-another-service`,
      severity: 'error',
      comment: `lib/${service}/ never imports another service's domain: services meet over HTTP through lib/clients/, or share through lib/network/.`,
      from: { path: `^lib/${service}/` },
      to: { path: `^lib/(${SERVICES.filter((s) => s !== service).join('|')})/` },
    })),
    {
      name: 'clients-import-only-platform-and-network',
      severity: 'error',
      comment: 'lib/clients/ speak HTTP to a service: they import lib/platform/ and lib/network/ only, never a service domain.',
      from: { path: '^lib/clients/' },
      to: { path: '^lib/', pathNot: '^lib/(clients|network|platform)/' },
    },
    {
      name: 'only-wiring-imports-context',
      severity: 'error',
      comment: 'lib/context.ts wires a process together; modules under lib/ take the narrow dependencies they use, never the context.',
      from: { path: '^lib/.+/' },
      to: { path: '^lib/context\\.ts$' },
    },
    {
      name: 'lib-imports-no-entry-points',
      severity: 'error',
      comment: 'lib/ is shared below the entry points: it never imports api/, tasks/, workers/ or bin/.',
      from: { path: '^lib/' },
      to: { path: '^(api|tasks|workers|bin)/' },
    },
    {
      name: 'api-and-tasks-stay-apart',
      severity: 'error',
      comment: 'api/ (HTTP) and tasks/ (the worker\'s jobs) never import each other: what both need lives in lib/.',
      from: { path: '^(api|tasks)/' },
      to: { path: '^(api|tasks)/' , pathNot: '^$1/' },
    },
    {
      name: 'api-services-stay-apart',
      severity: 'error',
      comment: 'api/<service>/ never imports another service\'s routes: shared HTTP code lives in api/http/.',
      from: { path: '^api/(signals|search|aggregator)/' },
      to: { path: '^api/(signals|search|aggregator)/', pathNot: '^api/$1/' },
    },
    {
      name: 'nothing-imports-bench-or-test',
      severity: 'error',
      comment: 'bench/ and test/ are leaves: nothing else imports them.',
      from: { pathNot: '^(bench|test)/' },
      to: { path: '^(bench|test)/' },
    },
    {
      name: 'no-unresolvable',
      severity: 'error',
      comment: 'An import that resolves to no file (a moved or misspelt path).',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      extensions: ['.ts', '.js', '.json'],
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types'],
    },
  },
};
