#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A token server of the distribution token protocol for the registry tests:
# GET /token?service=S&scope=repository:NAME:ACTIONS[&scope=...] with HTTP
# basic credentials answers {"token", "access_token", "expires_in"}: an RS256
# JWT whose header carries the signing certificate (x5c) and whose claims
# grant each requested scope the actions the user may have. Unknown users,
# wrong passwords and anonymous requests get 401. Each request is logged as
# one line "USER SCOPE..." to LOG.
#
# usage: oci-token-server.py PORT_FILE LOG KEY.pem CERT.pem ISSUER SERVICE USER:PASS:ACTIONS...
import base64
import http.server
import json
import os
import sys
import time
import urllib.parse

import jwt
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

port_file, log, key_file, cert_file, issuer, service = sys.argv[1:7]
users = {}
for spec in sys.argv[7:]:
    name, password, actions = spec.split(":", 2)
    users[name] = (password, set(actions.split(",")))
key = open(key_file, "rb").read()
cert = x509.load_pem_x509_certificate(open(cert_file, "rb").read())
x5c = [base64.b64encode(cert.public_bytes(Encoding.DER)).decode()]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="token"')
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        user = None
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            if name in users and users[name][0] == password:
                user = name
        with open(log, "a") as f:
            f.write("%s %s\n" % (user or "-", " ".join(q.get("scope", []))))
        if url.path != "/token" or q.get("service") != [service]:
            return self.reply(400, {"errors": "bad service"})
        if user is None:
            return self.reply(401, {"errors": "unauthorized"})
        access = []
        for scope in q.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            granted = [a for a in actions.split(",") if a in users[user][1]]
            access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        claims = {"iss": issuer, "sub": user, "aud": service, "iat": now, "nbf": now - 5,
                  "exp": now + 300, "jti": os.urandom(8).hex(), "access": access}
        token = jwt.encode(claims, key, algorithm="RS256", headers={"x5c": x5c})
        self.reply(200, {"token": token, "access_token": token, "expires_in": 300})


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
