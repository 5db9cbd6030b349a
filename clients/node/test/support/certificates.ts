import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { workDirectory } from "./tickd-server";

/** PEM files of a throw-away CA, a server certificate for 127.0.0.1/localhost, and a client certificate. */
export interface TestCertificates {
  directory: string;
  caCertFile: string;
  serverCertFile: string;
  serverKeyFile: string;
  ca: Buffer;
  clientCert: Buffer;
  clientKey: Buffer;
}

/** Makes the certificates with the openssl command line (EC P-256 keys: fast to generate). */
export function makeCertificates(): TestCertificates {
  const directory = mkdtempSync(join(workDirectory(), "certs-"));
  const file = (name: string) => join(directory, name);
  const openssl = (...args: string[]) => execFileSync("openssl", args, { cwd: directory, stdio: ["ignore", "ignore", "pipe"] });
  const newKey = (name: string) => openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", file(name));

  newKey("ca.key");
  openssl("req", "-x509", "-new", "-key", file("ca.key"), "-days", "2", "-subj", "/CN=tickd test CA", "-out", file("ca.pem"));

  const issue = (name: string, subject: string, extensions: string) => {
    newKey(`${name}.key`);
    openssl("req", "-new", "-key", file(`${name}.key`), "-subj", subject, "-out", file(`${name}.csr`));
    writeFileSync(file(`${name}.ext`), extensions);
    openssl(
      "x509", "-req", "-in", file(`${name}.csr`), "-CA", file("ca.pem"), "-CAkey", file("ca.key"),
      "-CAcreateserial", "-days", "2", "-extfile", file(`${name}.ext`), "-out", file(`${name}.pem`),
    );
  };
  issue(
    "server",
    "/CN=localhost",
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
  );
  issue("client", "/CN=tickd test client", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n");

  // rustls wants a PKCS#8 key; convert both to be safe.
  for (const name of ["server", "client"]) {
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", file(`${name}.key`), "-out", file(`${name}.pk8.pem`));
  }
  return {
    directory,
    caCertFile: file("ca.pem"),
    serverCertFile: file("server.pem"),
    serverKeyFile: file("server.pk8.pem"),
    ca: readFileSync(file("ca.pem")),
    clientCert: readFileSync(file("client.pem")),
    clientKey: readFileSync(file("client.pk8.pem")),
  };
}
