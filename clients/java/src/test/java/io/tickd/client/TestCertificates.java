package io.tickd.client;

import static org.junit.Assert.assertEquals;

import java.nio.file.Path;
import java.util.Arrays;

/** A throw-away CA with a server certificate for 127.0.0.1 and a client certificate, made with openssl. */
final class TestCertificates {
    final Path ca;
    final Path serverCertificate;
    final Path serverKey;
    final Path clientCertificate;
    final Path clientKey;

    private TestCertificates(Path dir) {
        ca = dir.resolve("ca.pem");
        serverCertificate = dir.resolve("server.pem");
        serverKey = dir.resolve("server.key");
        clientCertificate = dir.resolve("client.pem");
        clientKey = dir.resolve("client.key");
    }

    static TestCertificates create(Path dir) throws Exception {
        TestCertificates files = new TestCertificates(dir);
        Path caKey = dir.resolve("ca.key");
        openssl(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", caKey.toString(), "-out", files.ca.toString(), "-days", "2", "-subj", "/CN=tickd test CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
        issue(dir, caKey, files.ca, "server", "/CN=127.0.0.1",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
        issue(dir, caKey, files.ca, "client", "/CN=tickd test client", "extendedKeyUsage=clientAuth\n");
        return files;
    }

    /** A key (PKCS#8 PEM, which Netty reads) and a certificate signed by the CA. */
    private static void issue(Path dir, Path caKey, Path ca, String name, String subject, String extensions) throws Exception {
        Path extensionFile = dir.resolve(name + ".ext");
        java.nio.file.Files.write(extensionFile, extensions.getBytes());
        openssl(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", dir.resolve(name + ".key").toString(), "-out", dir.resolve(name + ".csr").toString(), "-subj", subject);
        openssl(dir, "x509", "-req", "-in", dir.resolve(name + ".csr").toString(), "-CA", ca.toString(),
                "-CAkey", caKey.toString(), "-CAcreateserial", "-days", "2", "-extfile", extensionFile.toString(),
                "-out", dir.resolve(name + ".pem").toString());
    }

    private static void openssl(Path dir, String... arguments) throws Exception {
        String[] command = new String[arguments.length + 1];
        command[0] = "openssl";
        System.arraycopy(arguments, 0, command, 1, arguments.length);
        Process process = new ProcessBuilder(command).directory(dir.toFile())
                .redirectErrorStream(true).redirectOutput(dir.resolve("openssl.log").toFile()).start();
        assertEquals("openssl " + Arrays.toString(arguments) + " (see " + dir.resolve("openssl.log") + ")", 0, process.waitFor());
    }
}
