// The REST API, as the SDKs call it: the console has no API of its own.
// The API key is in the HttpOnly cookie that POST /console/session set;
// the server takes it only beside the X-Hutch-Console header, which a
// page of another origin cannot send.

/** An answer of the API that is not a success: E2B's {code, message}. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Called when the API answers 401: the session is gone. */
let unauthorized: () => void = () => {};

export function onUnauthorized(f: () => void): void {
  unauthorized = f;
}

/** The headers of every API call the console makes. */
export const consoleHeaders: Record<string, string> = { "X-Hutch-Console": "1" };

/** api calls the REST API and decodes its JSON answer. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { ...consoleHeaders };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    try {
      const e = (await resp.json()) as { message?: string };
      if (e.message) message = e.message;
    } catch {
      // Not E2B's error body: the status says enough.
    }
    if (resp.status === 401 && path !== "/console/session") unauthorized();
    throw new APIError(resp.status, message);
  }
  if (resp.status === 204) return undefined as T;
  return (await resp.json()) as T;
}

/** The API's shapes the console reads (E2B's field names). */
export interface ListedSandbox {
  sandboxID: string;
  templateID: string;
  alias?: string;
  startedAt: string;
  endAt: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata?: Record<string, string>;
  state: "running" | "paused";
}

export interface SandboxDetail extends ListedSandbox {
  envdAccessToken?: string;
}

export interface SandboxMetric {
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

export interface LogEntry {
  timestamp: string;
  level: string;
  message: string;
  fields: Record<string, string>;
}

export interface Template {
  templateID: string;
  buildID: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  public: boolean;
  createdAt: string;
  buildStatus: string;
}

export interface TemplateBuild {
  buildID: string;
  status: string;
  createdAt: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB?: number;
  /** Hutch's own: the build's layers, bottom first. */
  layers?: TemplateLayer[];
}

export interface TemplateLayer {
  id: string;
  sizeBytes: number;
  source?: string;
  createdAt: string;
}

export interface TemplateWithBuilds {
  templateID: string;
  public: boolean;
  builds: TemplateBuild[];
}

export interface BuildLogEntry {
  timestamp: string;
  level: string;
  message: string;
  step?: string;
}

export interface BuildStatus {
  templateID: string;
  buildID: string;
  status: string;
  logEntries: BuildLogEntry[];
  reason?: { message: string; step?: string };
}

export interface Snapshot {
  snapshotID: string;
  names?: string[];
  sandboxID?: string;
  createdAt?: string;
  [k: string]: unknown;
}

export interface APIKey {
  id: string;
  name: string;
  prefix: string;
  role: "admin" | "user";
  createdAt: string;
  revokedAt: string | null;
  current: boolean;
}

export interface CreatedAPIKey extends Omit<APIKey, "revokedAt" | "current"> {
  key: string;
}

export interface AuditEvent {
  seq: number;
  time: string;
  keyID: string;
  sandboxID?: string;
  kind: string;
  action: string;
  outcome: "ok" | "error";
  detail?: unknown;
}

/** esc makes a path segment of an id. */
export const seg = encodeURIComponent;
