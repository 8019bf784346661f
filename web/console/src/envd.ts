// A sandbox's envd, reached as the SDKs reach it: through hutch serve's
// edge router on this same origin, the sandbox named by E2b-Sandbox-Id and
// E2b-Sandbox-Port, envd's own access token in X-Access-Token. The
// server strips the console's cookie from what it sends on to a sandbox.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";

import { api, seg, type SandboxDetail } from "./api";
import { Filesystem } from "./gen/filesystem/filesystem_pb";
import { Process } from "./gen/process/process_pb";

/** envdPort is envd's port in every sandbox (E2B's constant). */
const envdPort = "49983";

/** Envd is one sandbox's envd: its Connect services and its /files. */
export class Envd {
  readonly process: Client<typeof Process>;
  readonly fs: Client<typeof Filesystem>;

  constructor(
    readonly sandboxID: string,
    private readonly token: string,
  ) {
    const headers = this.headers();
    const route: Interceptor = (next) => async (req) => {
      for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
      return next(req);
    };
    const transport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [route] });
    this.process = createClient(Process, transport);
    this.fs = createClient(Filesystem, transport);
  }

  /** headers are what routes a request to this sandbox's envd. */
  headers(): Record<string, string> {
    const h: Record<string, string> = { "E2b-Sandbox-Id": this.sandboxID, "E2b-Sandbox-Port": envdPort };
    if (this.token) h["X-Access-Token"] = this.token;
    return h;
  }

  /** filesURL is envd's /files for path (the token stays in a header). */
  filesURL(path: string): string {
    return `/files?${new URLSearchParams({ path })}`;
  }
}

/**
 * envdFor finds a sandbox's envd token with GET /sandboxes/{id}: unlike
 * connect, it neither resumes a paused sandbox nor changes its timeout.
 */
export async function envdFor(sandboxID: string): Promise<Envd> {
  const d = await api<SandboxDetail>("GET", `/sandboxes/${seg(sandboxID)}`);
  return new Envd(sandboxID, d.envdAccessToken ?? "");
}
