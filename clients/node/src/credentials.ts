import { credentials, Metadata } from "@grpc/grpc-js";
import type { ChannelCredentials, ChannelOptions } from "@grpc/grpc-js";
import type { TlsOptions } from "./options";

/** Plaintext, or TLS with the CA and client certificate given. */
export function channelCredentials(tls: TlsOptions | true | undefined): ChannelCredentials {
  if (tls === undefined) return credentials.createInsecure();
  if (tls === true) return credentials.createSsl();
  return credentials.createSsl(toBuffer(tls.ca), toBuffer(tls.key), toBuffer(tls.cert));
}

/** The channel option that makes grpc-js check the certificate against `serverName`. */
export function tlsChannelOptions(tls: TlsOptions | true | undefined): ChannelOptions {
  if (tls === undefined || tls === true || tls.serverName === undefined) return {};
  return { "grpc.ssl_target_name_override": tls.serverName, "grpc.default_authority": tls.serverName };
}

/**
 * The metadata every call carries. The token goes in plain metadata rather than grpc-js call
 * credentials because those refuse to send over a plaintext channel, and tickd accepts a
 * token over plaintext (for a loopback or a Unix socket behind a proxy).
 */
export function callMetadata(token: string | undefined): Metadata {
  const metadata = new Metadata();
  if (token !== undefined) metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

function toBuffer(pem: Buffer | string | undefined): Buffer | null {
  if (pem === undefined) return null;
  return typeof pem === "string" ? Buffer.from(pem) : pem;
}
