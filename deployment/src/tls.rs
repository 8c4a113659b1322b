//! `rediss://` targets: lockstorm speaks TLS in one place. For each TLS
//! endpoint a bridge listens on 127.0.0.1 and carries every connection made
//! to it to the endpoint over TLS (rustls, checked against `--tls-ca` or the
//! system's roots). Everything else (workers, adapters, the fault proxy,
//! the audit, the preflight and the cleanup) then talks plain RESP to the
//! bridge on loopback, as to any node, and the target keeps its own name for
//! display (`Endpoint::via` holds the bridge's address).

use crate::target::{Endpoint, Target};
use crate::{Error, Result};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// How long a TLS handshake may take.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(5);

/// The bridges of one run; they stop when dropped.
pub struct Bridges(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Bridges {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// For a TLS target, a bridge per endpoint and the target reached through
/// them (plain, each endpoint's `via` set); any other target as it is.
/// The first handshake is made here, so a certificate the roots do not
/// trust is one clear line before anything else.
pub async fn bridge(target: &Target, ca: Option<&Path>) -> Result<(Target, Bridges)> {
    if !target.tls {
        if let Some(ca) = ca {
            return Err(Error::Usage(format!(
                "--tls-ca {} is for a TLS target, and {target} is not one: write rediss://, or drop --tls-ca",
                ca.display()
            )));
        }
        return Ok((target.clone(), Bridges(Vec::new())));
    }
    let connector = TlsConnector::from(Arc::new(client_config(ca)?));
    let mut through = target.clone();
    let mut tasks = Vec::new();
    for at in &mut through.endpoints {
        let name = ServerName::try_from(at.host.clone()).map_err(|e| {
            Error::Usage(format!(
                "--target: {} is not a TLS server name: {e}",
                at.host
            ))
        })?;
        handshake(&connector, at, name.clone()).await?;
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|source| Error::Io {
                context: "listening for the TLS bridge".into(),
                source,
            })?;
        at.via = Some(listener.local_addr().map_err(|source| Error::Io {
            context: "the TLS bridge's address".into(),
            source,
        })?);
        let upstream = (at.host.clone(), at.port);
        tasks.push(tokio::spawn(serve(
            listener,
            connector.clone(),
            name,
            upstream,
        )));
    }
    Ok((through, Bridges(tasks)))
}

/// The roots: the CA file given, else the system's.
fn client_config(ca: Option<&Path>) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(file) => {
            let certs = CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| {
                    Error::Usage(format!(
                        "--tls-ca {}: not a PEM certificate file ({e}); give the CA that signed the server's certificate",
                        file.display()
                    ))
                })?;
            if certs.is_empty() {
                return Err(Error::Usage(format!(
                    "--tls-ca {}: holds no certificate (no -----BEGIN CERTIFICATE----- block); give the CA that signed the server's certificate",
                    file.display()
                )));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| Error::Usage(format!("--tls-ca {}: {e}", file.display())))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Usage(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

async fn handshake(
    connector: &TlsConnector,
    at: &Endpoint,
    name: ServerName<'static>,
) -> Result<()> {
    let fail = |why: String| Error::Usage(format!("--target rediss://{at}: {why}"));
    let attempt = async {
        let tcp = TcpStream::connect((at.host.as_str(), at.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        connector.connect(name, tcp).await.map_err(|e| {
            format!(
                "TLS handshake failed: {e}; give the CA that signed its certificate with --tls-ca"
            )
        })
    };
    match tokio::time::timeout(HANDSHAKE_WITHIN, attempt).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(why)) => Err(fail(why)),
        Err(_) => Err(fail(format!(
            "no TLS handshake within {HANDSHAKE_WITHIN:?}"
        ))),
    }
}

/// Carries each plain connection to the upstream over TLS, both ways,
/// until either side closes.
async fn serve(
    listener: TcpListener,
    connector: TlsConnector,
    name: ServerName<'static>,
    upstream: (String, u16),
) {
    while let Ok((mut plain, _)) = listener.accept().await {
        let (connector, name, upstream) = (connector.clone(), name.clone(), upstream.clone());
        tokio::spawn(async move {
            let Ok(tcp) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await else {
                return;
            };
            let _ = tcp.set_nodelay(true);
            let _ = plain.set_nodelay(true);
            match connector.connect(name, tcp).await {
                Ok(mut tls) => {
                    let _ = tokio::io::copy_bidirectional(&mut plain, &mut tls).await;
                }
                Err(e) => tracing::warn!("TLS bridge to {}:{}: {e}", upstream.0, upstream.1),
            }
        });
    }
}
