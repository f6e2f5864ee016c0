#!/usr/bin/env bash
# Throwaway TLS material for tests, made with the openssl command:
#   make-certs.sh DIR
# writes into DIR (PEM, unencrypted keys, valid for 2 days):
#   ca.crt ca.key          a test CA
#   server.crt server.key  signed by it, for 127.0.0.1 and localhost (subjectAltName)
#   client.crt client.key  signed by it, a client certificate (CN=zpipe-test-client)
#   other-ca.crt           an unrelated CA, for "does not trust" cases
#   ec.key                 an EC key of no certificate, for "wrong key" cases
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
ossl() { openssl "$@" 2>/dev/null; }
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=zpipe test CA" \
  -keyout ca.key -out ca.crt
ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=zpipe other CA" \
  -keyout other-ca.key -out other-ca.crt
ossl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
ossl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.crt
ossl req -newkey rsa:2048 -nodes -subj "/CN=zpipe-test-client" -keyout client.key -out client.csr
printf 'extendedKeyUsage=clientAuth\n' >client.ext
ossl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile client.ext -out client.crt
ossl ecparam -genkey -name prime256v1 -noout -out ec.key
rm -f ./*.csr ./*.ext ca.srl
