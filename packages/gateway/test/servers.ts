/**
 * Real loopback HTTP servers for each supported framework, all serving the same routes through
 * a {@link Gateway}: `GET /orders/:id` (200), `GET /fail/:id` (500), `GET /hang/:id` (never
 * answers) and `GET /login` (exact limiter route when `limit` is given).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { expressMiddleware, registerFastify, fastifyOnRequest, type Gateway, type LimitOptions } from '../src/index.js';

export type Framework = 'node:http' | 'express' | 'fastify';
export const FRAMEWORKS: readonly Framework[] = ['node:http', 'express', 'fastify'];

export interface RunningServer {
  readonly url: string;
  /** The path dimension the framework reports for `/orders/42`. */
  readonly orderPath: string;
  close(): Promise<void>;
}

function listen(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
  });
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** Starts `framework` on an ephemeral loopback port. */
export async function startServer(framework: Framework, gateway: Gateway, limit?: LimitOptions): Promise<RunningServer> {
  if (framework === 'node:http') {
    const app = gateway.wrap((req, res) => {
      if (req.url?.startsWith('/hang/')) return;
      res.statusCode = req.url?.startsWith('/fail/') ? 500 : 200;
      res.end('ok');
    });
    const login = gateway.wrap(
      (_req, res) => {
        res.end('welcome');
      },
      { resource: 'login', path: '/login', limit },
    );
    const server = createServer((req, res) => (req.url === '/login' ? login(req, res) : app(req, res)));
    const url = await listen(server);
    return { url, orderPath: '/orders/42', close: () => closeServer(server) };
  }
  if (framework === 'express') {
    const app = express();
    const all = expressMiddleware(gateway);
    app.get('/orders/:id', all, (_req, res) => void res.send('ok'));
    app.get('/fail/:id', all, (_req, res) => void res.status(500).send('boom'));
    app.get('/hang/:id', all, () => undefined);
    app.get(
      '/login',
      expressMiddleware(gateway, { resource: 'login', path: '/login', limit }),
      (_req, res) => void res.send('welcome'),
    );
    const server = createServer(app);
    const url = await listen(server);
    return { url, orderPath: '/orders/42', close: () => closeServer(server) };
  }
  const app = Fastify();
  await app.register((scope, _opts, done) => {
    registerFastify(scope, gateway);
    scope.get('/orders/:id', async () => 'ok');
    scope.get('/fail/:id', async (_req, reply) => reply.code(500).send('boom'));
    scope.get('/hang/:id', (_req, _reply) => undefined);
    done();
  });
  app.get(
    '/login',
    { onRequest: fastifyOnRequest(gateway, { resource: 'login', path: '/login', limit }) },
    async () => 'welcome',
  );
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    orderPath: '/orders/:id',
    close: async () => {
      app.server.closeAllConnections();
      await app.close();
    },
  };
}
