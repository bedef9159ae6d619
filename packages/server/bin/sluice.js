#!/usr/bin/env node
// The `sluice` command. A checked-in file rather than dist/cli.js itself, so that package
// managers can link it before the first build.
await import('../dist/cli.js');
