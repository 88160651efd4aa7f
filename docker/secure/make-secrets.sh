#!/usr/bin/env bash
# Writes docker/secure/secrets/ for compose.secure.yaml: a throwaway CA, the exporter's
# certificate (gpu-exporter, localhost, 127.0.0.1) and key, a random scrape password, its
# bcrypt hash in web-config.yml. Needs openssl, and $PYTHON (default python3) with bcrypt
# (pip install bcrypt) or htpasswd (apache2-utils). Existing files are kept unless --force.
# SECRETS_DIR overrides where they go (default: docker/secure/secrets).
set -euo pipefail
dir="${SECRETS_DIR:-$(cd "$(dirname "$0")" && pwd)/secrets}"
if [ -e "$dir/web-config.yml" ] && [ "${1:-}" != "--force" ]; then
  echo "$dir already holds secrets (use --force to replace them)"; exit 0
fi
mkdir -p "$dir"
umask 077
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -keyout ca.key -out ca.crt -subj "/CN=gpu-exporter compose CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout exporter.key \
  -out exporter.csr -subj "/CN=gpu-exporter" 2>/dev/null
printf 'subjectAltName=DNS:gpu-exporter,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in exporter.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
  -extfile ext.cnf -out exporter.crt 2>/dev/null
rm -f exporter.csr ext.cnf ca.srl
openssl rand -hex 24 > password
py=${PYTHON:-python3}
if "$py" -c 'import bcrypt' 2>/dev/null; then
  hash=$("$py" -c 'import bcrypt, sys; print(bcrypt.hashpw(sys.stdin.read().strip().encode(), bcrypt.gensalt(10)).decode())' < password)
elif command -v htpasswd >/dev/null; then
  hash=$(htpasswd -nbBC 10 "" "$(cat password)" | tr -d ':\n')
else
  echo "make-secrets.sh: need python3 with bcrypt (or set PYTHON) or htpasswd" >&2; exit 2
fi
cat > web-config.yml <<END
# exporter-toolkit web config (docs/security.md). Paths are relative to this file.
tls_server_config:
  cert_file: exporter.crt
  key_file: exporter.key
basic_auth_users:
  prometheus: '$hash'
END
# The containers run as other users (nobody): the files must be readable by them. On a shared
# host chown them to 65534 and chmod 0400 instead.
chmod 0644 ca.crt exporter.crt web-config.yml password exporter.key
rm -f ca.key
echo "wrote $dir; password: $(cat password)"
