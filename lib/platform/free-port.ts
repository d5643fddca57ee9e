/** A TCP port free on 127.0.0.1 right now (the OS picks it), for benchmarks and tests. */
import net from 'node:net';

/** Resolves with a port nothing listens on at the moment of the call. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    }).on('error', reject);
  });
}
