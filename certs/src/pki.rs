//! Pure certificate logic with an injected clock (`now`): making a CA and a serving
//! certificate, reading them back, and deciding which rotation is due.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;

use crate::{CertConfig, Error};

/// Common name of the operator's CA.
pub(crate) const CA_COMMON_NAME: &str = "llmscaler-webhook-ca";
/// Organization of every certificate made here.
pub(crate) const ORGANIZATION: &str = "llmscaler";
/// How far back `notBefore` is set, to tolerate clock skew between the operator and the API
/// server.
pub(crate) const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// The certificate material kept in the Secret (all PEM text).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CertState {
    /// The CA that signs the serving certificate.
    pub ca_cert_pem: String,
    /// Its private key.
    pub ca_key_pem: String,
    /// The CA being introduced during a switch (in the bundle, not yet signing).
    pub next_ca_cert_pem: Option<String>,
    /// Its private key.
    pub next_ca_key_pem: Option<String>,
    /// The CA replaced by the last switch, trusted until it expires.
    pub previous_ca_cert_pem: Option<String>,
    /// The serving certificate (leaf).
    pub tls_cert_pem: String,
    /// Its private key.
    pub tls_key_pem: String,
}

/// What a server needs: its certificate chain and key, and the bundle its clients must trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingPems {
    /// The serving certificate (PEM, leaf only).
    pub cert_chain_pem: String,
    /// Its private key (PEM, PKCS#8).
    pub key_pem: String,
    /// The CA bundle for `caBundle` (PEM: previous, active and next CA, those present).
    pub ca_bundle_pem: String,
}

impl CertState {
    /// The bundle clients must trust: previous CA, active CA, next CA (those present), PEM
    /// blocks each ending in a newline.
    pub fn ca_bundle_pem(&self) -> String {
        [
            self.previous_ca_cert_pem.as_deref(),
            Some(self.ca_cert_pem.as_str()),
            self.next_ca_cert_pem.as_deref(),
        ]
        .into_iter()
        .flatten()
        .map(|pem| {
            let pem = pem.trim_end();
            format!("{pem}\n")
        })
        .collect()
    }

    /// The serving certificate, its key and the CA bundle.
    pub(crate) fn serving_pems(&self) -> ServingPems {
        ServingPems {
            cert_chain_pem: self.tls_cert_pem.clone(),
            key_pem: self.tls_key_pem.clone(),
            ca_bundle_pem: self.ca_bundle_pem(),
        }
    }
}

/// Validity and names of one certificate, as read from its PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: OffsetDateTime,
    /// End of validity.
    pub not_after: OffsetDateTime,
    /// DNS names and IP addresses (as text) of the subjectAltName extension.
    pub sans: BTreeSet<String>,
    /// The DER of the certificate.
    pub der: Vec<u8>,
}

impl CertInfo {
    /// Time left at `now` (zero once expired).
    pub fn remaining(&self, now: OffsetDateTime) -> time::Duration {
        (self.not_after - now).max(time::Duration::ZERO)
    }

    /// Total lifetime.
    pub(crate) fn lifetime(&self) -> time::Duration {
        self.not_after - self.not_before
    }

    /// Whether at most a third of the lifetime is left at `now` (the renewal point).
    pub(crate) fn due_for_renewal(&self, now: OffsetDateTime) -> bool {
        self.remaining(now) * 3 <= self.lifetime()
    }
}

/// Reads validity and names from a PEM certificate (the first block).
///
/// # Errors
/// [`Error::Parse`] (naming `what`) when there is no PEM certificate or it cannot be decoded.
pub fn inspect(pem: &str, what: &str) -> Result<CertInfo, Error> {
    let parse = |reason: String| Error::Parse {
        what: what.to_string(),
        reason,
    };
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| parse(e.to_string()))?;
    let cert = block.parse_x509().map_err(|e| parse(e.to_string()))?;
    let time = |t: x509_parser::time::ASN1Time| {
        OffsetDateTime::from_unix_timestamp(t.timestamp()).map_err(|e| parse(e.to_string()))
    };
    let mut sans = BTreeSet::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(dns) => {
                    sans.insert((*dns).to_string());
                }
                GeneralName::IPAddress(bytes) => {
                    if let Some(ip) = ip_from_bytes(bytes) {
                        sans.insert(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        not_before: time(cert.validity().not_before)?,
        not_after: time(cert.validity().not_after)?,
        sans,
        der: block.contents.clone(),
    })
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Whether `leaf_pem` is signed by `ca_pem`'s key.
pub(crate) fn signed_by(leaf_pem: &str, ca_pem: &str) -> bool {
    let Ok((_, leaf)) = x509_parser::pem::parse_x509_pem(leaf_pem.as_bytes()) else {
        return false;
    };
    let Ok((_, ca)) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()) else {
        return false;
    };
    let (Ok(leaf), Ok(ca)) = (leaf.parse_x509(), ca.parse_x509()) else {
        return false;
    };
    leaf.verify_signature(Some(ca.public_key())).is_ok()
}

fn generate(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
    move |source| Error::Generate { what, source }
}

fn random_serial() -> Result<SerialNumber, Error> {
    // A fresh key's public bytes are random: use 16 of them (first bit cleared) as the serial.
    let key = KeyPair::generate().map_err(generate("a serial number"))?;
    let raw = key.public_key_raw();
    let mut bytes: Vec<u8> = raw.iter().rev().take(16).copied().collect();
    if let Some(first) = bytes.first_mut() {
        *first &= 0x7f;
    }
    Ok(SerialNumber::from_slice(&bytes))
}

fn to_time(duration: Duration) -> time::Duration {
    time::Duration::try_from(duration).unwrap_or(time::Duration::MAX)
}

/// A new self-signed CA valid from `now - BACKDATE` for `validity`: `(cert_pem, key_pem)`.
///
/// # Errors
/// [`Error::Generate`] when rcgen fails.
pub(crate) fn new_ca(now: OffsetDateTime, validity: Duration) -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(generate("the CA key"))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(
        DnType::CommonName,
        format!("{CA_COMMON_NAME}@{}", now.unix_timestamp()),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(random_serial()?);
    params.not_before = now - to_time(BACKDATE);
    params.not_after = now + to_time(validity);
    let cert = params
        .self_signed(&key)
        .map_err(generate("the CA certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `sans` (DNS names or IP addresses) signed by the CA in
/// `ca_cert_pem`/`ca_key_pem`, valid from `now - BACKDATE` for `validity` but never past the
/// CA: `(cert_pem, key_pem)`.
///
/// # Errors
/// [`Error::Parse`] when the CA cannot be read, [`Error::Generate`] when rcgen fails (e.g. an
/// invalid DNS name).
pub(crate) fn new_serving(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    sans: &[String],
    now: OffsetDateTime,
    validity: Duration,
) -> Result<(String, String), Error> {
    let ca_info = inspect(ca_cert_pem, "the CA certificate")?;
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| Error::Parse {
        what: "the CA key".to_string(),
        reason: e.to_string(),
    })?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(|e| Error::Parse {
        what: "the CA certificate".to_string(),
        reason: e.to_string(),
    })?;
    let key = KeyPair::generate().map_err(generate("the serving key"))?;
    let mut params =
        CertificateParams::new(sans.to_vec()).map_err(generate("the serving certificate names"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(
        DnType::CommonName,
        sans.first()
            .map(String::as_str)
            .unwrap_or("llmscaler-webhook"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial()?);
    params.not_before = now - to_time(BACKDATE);
    params.not_after = (now + to_time(validity)).min(ca_info.not_after);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(generate("the serving certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A fresh state: a new CA and a serving certificate for [`CertConfig::subject_alt_names`].
///
/// # Errors
/// As [`new_ca`] and [`new_serving`].
pub fn new_state(cfg: &CertConfig, now: OffsetDateTime) -> Result<CertState, Error> {
    let (ca_cert_pem, ca_key_pem) = new_ca(now, cfg.ca_validity)?;
    let (tls_cert_pem, tls_key_pem) = new_serving(
        &ca_cert_pem,
        &ca_key_pem,
        &cfg.subject_alt_names(),
        now,
        cfg.serving_validity,
    )?;
    Ok(CertState {
        ca_cert_pem,
        ca_key_pem,
        next_ca_cert_pem: None,
        next_ca_key_pem: None,
        previous_ca_cert_pem: None,
        tls_cert_pem,
        tls_key_pem,
    })
}

/// The state after every rotation due at `now`, or `None` when nothing is due. In order:
/// 1. an unreadable or expired active CA: start over with [`new_state`];
/// 2. drop a previous CA that has expired, and a next CA that cannot be read;
/// 3. with at most a third of the active CA's life left and no next CA: make one (published in
///    the bundle, not signing yet);
/// 4. a next CA older than a sixth of [`CertConfig::ca_validity`] (or an active CA about to
///    expire within that): the next CA becomes active, the old one becomes previous;
/// 5. reissue the serving certificate when it is unreadable, not signed by the active CA, its
///    names differ from [`CertConfig::subject_alt_names`], or a third of its life is left.
///
/// # Errors
/// As [`new_ca`] and [`new_serving`].
pub(crate) fn renew(
    state: &CertState,
    cfg: &CertConfig,
    now: OffsetDateTime,
) -> Result<Option<CertState>, Error> {
    let active = match inspect(&state.ca_cert_pem, "ca.crt") {
        Ok(info) if info.not_after > now && KeyPair::from_pem(&state.ca_key_pem).is_ok() => info,
        _ => return new_state(cfg, now).map(Some),
    };
    let overlap = to_time(cfg.ca_validity) / 6;
    let mut next = state.clone();

    if let Some(previous) = &state.previous_ca_cert_pem {
        let expired = inspect(previous, "previous-ca.crt").is_ok_and(|p| p.not_after <= now);
        if expired || inspect(previous, "previous-ca.crt").is_err() {
            next.previous_ca_cert_pem = None;
        }
    }
    let next_ca = match (&state.next_ca_cert_pem, &state.next_ca_key_pem) {
        (Some(cert), Some(key)) => match inspect(cert, "next-ca.crt") {
            Ok(info) if info.not_after > now && KeyPair::from_pem(key).is_ok() => Some(info),
            _ => None,
        },
        _ => None,
    };
    if next_ca.is_none() {
        next.next_ca_cert_pem = None;
        next.next_ca_key_pem = None;
    }
    match next_ca {
        None if active.due_for_renewal(now) => {
            let (cert, key) = new_ca(now, cfg.ca_validity)?;
            next.next_ca_cert_pem = Some(cert);
            next.next_ca_key_pem = Some(key);
        }
        Some(info) if now - info.not_before >= overlap || active.remaining(now) <= overlap => {
            if let (Some(cert), Some(key)) =
                (next.next_ca_cert_pem.take(), next.next_ca_key_pem.take())
            {
                next.previous_ca_cert_pem = Some(std::mem::replace(&mut next.ca_cert_pem, cert));
                next.ca_key_pem = key;
            }
        }
        _ => {}
    }

    let wanted: BTreeSet<String> = cfg.subject_alt_names().into_iter().collect();
    let serving_ok = inspect(&next.tls_cert_pem, "tls.crt").is_ok_and(|leaf| {
        leaf.not_after > now
            && !leaf.due_for_renewal(now)
            && leaf.sans == wanted
            && signed_by(&next.tls_cert_pem, &next.ca_cert_pem)
    }) && KeyPair::from_pem(&next.tls_key_pem).is_ok();
    if !serving_ok {
        let (cert, key) = new_serving(
            &next.ca_cert_pem,
            &next.ca_key_pem,
            &cfg.subject_alt_names(),
            now,
            cfg.serving_validity,
        )?;
        next.tls_cert_pem = cert;
        next.tls_key_pem = key;
    }
    Ok((next != *state).then_some(next))
}

#[cfg(test)]
mod tests;
