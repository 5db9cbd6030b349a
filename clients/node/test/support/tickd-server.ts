import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, createWriteStream, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/**
 * A real tickd for one test: started from $TICKD_BIN on a free port with a fresh data dir,
 * stopped with SIGTERM (and its exit status checked), restartable on the same port and data
 * dir. Each server's pid is written under the work dir so that the check's trap can kill a
 * tickd left behind by a crashed test run; an exit hook kills them too.
 */
export class TickdServer {
  private process: ChildProcess | undefined;
  private exited: Promise<number | null> | undefined;
  private port = 0;
  private starts = 0;

  private constructor(
    readonly directory: string,
    private readonly extraArguments: readonly string[],
  ) {}

  /** Starts a tickd with `extraArguments` added to the usual flags. */
  static async start(extraArguments: readonly string[] = []): Promise<TickdServer> {
    const server = new TickdServer(mkdtempSync(join(workDirectory(), "tickd-")), extraArguments);
    await server.launch();
    return server;
  }

  /** "127.0.0.1:PORT". */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get dataDirectory(): string {
    return join(this.directory, "data");
  }

  /** SIGTERM, then waits for the exit; throws unless tickd exited with status 0. */
  async stop(): Promise<void> {
    const process = this.process;
    if (process === undefined || this.exited === undefined) return;
    process.kill("SIGTERM");
    const status = await this.exited;
    this.process = undefined;
    rmSync(this.pidFile(), { force: true });
    if (status !== 0) throw new Error(`tickd exited with status ${status} (log: ${this.logFile()})`);
  }

  /** SIGKILL (no drain: tickd gets no say), then waits for the exit. */
  async kill(): Promise<void> {
    const process = this.process;
    if (process === undefined || this.exited === undefined) return;
    process.kill("SIGKILL");
    await this.exited;
    this.process = undefined;
    rmSync(this.pidFile(), { force: true });
  }

  /** Starts tickd again on the same port and data dir. */
  async restart(): Promise<void> {
    if (this.process !== undefined) await this.stop();
    await this.launch();
  }

  /** Stops tickd if it runs and removes its files. */
  async dispose(): Promise<void> {
    try {
      await this.stop();
    } finally {
      rmSync(this.directory, { recursive: true, force: true });
    }
  }

  private async launch(): Promise<void> {
    const binary = process.env.TICKD_BIN;
    if (!binary) throw new Error("TICKD_BIN must name the tickd binary");
    mkdirSync(this.dataDirectory, { recursive: true });
    this.starts += 1;
    const child = spawn(
      binary,
      [
        "--listen",
        `127.0.0.1:${this.port}`,
        "--metrics-listen",
        "127.0.0.1:0",
        "--data-dir",
        this.dataDirectory,
        "--log-format",
        "json",
        "--drain-timeout",
        "1s",
        ...this.extraArguments,
      ],
      { env: { ...process.env, TICKD_LOG: "info", NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] },
    );
    this.process = child;
    runningServers.add(child);
    this.exited = new Promise((resolve) => {
      child.on("exit", (code, signal) => {
        runningServers.delete(child);
        resolve(signal === null ? code : null);
      });
    });
    writeFileSync(this.pidFile(), `${child.pid}\n`);
    const log = createWriteStream(this.logFile(), { flags: "a" });
    this.port = await this.readServingPort(child, log);
  }

  /**
   * Copies tickd's log lines (stdout and stderr) to its log file, and resolves with the port of
   * the `tickd serving` line.
   */
  private readServingPort(child: ChildProcess, log: NodeJS.WritableStream): Promise<number> {
    return new Promise((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error(`tickd did not start in time (log: ${this.logFile()})`)), 60_000);
      const onLine = (line: string): void => {
        log.write(`${line}\n`);
        const listen = servingAddress(line);
        if (listen === undefined) return;
        clearTimeout(timeout);
        resolve(Number(listen.slice(listen.lastIndexOf(":") + 1)));
      };
      for (const output of [child.stdout, child.stderr]) {
        if (output !== null) createInterface({ input: output }).on("line", onLine);
      }
      child.on("exit", (code) => {
        clearTimeout(timeout);
        reject(new Error(`tickd exited with status ${code} before serving (log: ${this.logFile()})`));
      });
    });
  }

  private logFile(): string {
    return join(this.directory, `tickd-${this.starts}.log`);
  }

  private pidFile(): string {
    return join(this.directory, "tickd.pid");
  }
}

/** The `listen` field of a `tickd serving` JSON log line (fields may sit under `fields`). */
function servingAddress(line: string): string | undefined {
  try {
    const entry = JSON.parse(line) as { fields?: Record<string, unknown> } & Record<string, unknown>;
    const fields = entry.fields ?? entry;
    if (fields.message === "tickd serving" && typeof fields.listen === "string") return fields.listen;
  } catch {
    // Not JSON: a line tickd printed before its logger was set up.
  }
  return undefined;
}

/** Where the tests keep scratch files: the check points this at target/clients/node/. */
export function workDirectory(): string {
  const directory = process.env.TICKD_CLIENT_WORK_DIR ?? join(tmpdir(), "tickd-node-client-tests");
  mkdirSync(directory, { recursive: true });
  return directory;
}

const runningServers = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of runningServers) child.kill("SIGKILL");
});
