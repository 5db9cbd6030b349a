#!/bin/sh
# Generates the Java stubs from proto/, compiles the client and the example with javac against
# Debian's jars, and runs the example against tickd at $TICKD_ADDR (default 127.0.0.1:50051).
#
# Needs: apt-get install -y default-jdk-headless protobuf-compiler \
#   protobuf-compiler-grpc-java-plugin libgrpc-java libprotobuf-java libguava-java \
#   libnetty-java libperfmark-java libgeronimo-annotation-1.3-spec-java
# Output goes to $TICKD_JAVA_OUT (default clients/java/build, which git ignores).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${TICKD_JAVA_OUT:-$here/build}
jars=${TICKD_JAVA_JARS:-/usr/share/java}
plugin=${TICKD_GRPC_JAVA_PLUGIN:-/usr/bin/grpc_java_plugin}

classpath=""
for jar in grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub \
    protobuf guava netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks \
    netty-common netty-handler netty-handler-proxy netty-resolver netty-transport \
    perfmark-api geronimo-annotation-1.3-spec; do
    if [ ! -f "$jars/$jar.jar" ]; then
        echo "run.sh: $jars/$jar.jar is missing (see the apt-get line at the top of $0)" >&2
        exit 1
    fi
    classpath="$classpath${classpath:+:}$jars/$jar.jar"
done

rm -rf "$out/gen" "$out/classes"
mkdir -p "$out/gen" "$out/classes"
# protoc warns that dead/dead_count both want getDeadCount(); it names the latter getDeadCount4().
protoc -I"$repo/proto" \
    --plugin=protoc-gen-grpc-java="$plugin" \
    --java_out="$out/gen" --grpc-java_out="$out/gen" \
    "$repo/proto/tickd/v1/tickd.proto" 2>"$out/protoc.log" || { cat "$out/protoc.log" >&2; exit 1; }
javac -nowarn -encoding UTF-8 -d "$out/classes" -cp "$classpath" \
    $(find "$out/gen" "$here/src" -name '*.java')
exec java -cp "$out/classes:$classpath" tickd.example.Example
