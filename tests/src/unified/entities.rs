//! `createEntities`: clients (a driver `Client` on the router, with `uriOptions` appended to its
//! URI and command monitoring events captured as `observeEvents` asks), databases and
//! collections (with their options), and values saved by `saveResultAsEntity`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bson::{Bson, Document};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::{ClientOptions, CollectionOptions, DatabaseOptions};
use mongodb::{Client, Collection, Database};

/// A command monitoring event as the runner keeps it.
#[derive(Clone, Debug)]
pub enum Event {
    Started { name: String, db: String, command: Document },
    Succeeded { name: String, reply: Document },
    Failed { name: String },
}

impl Event {
    pub fn name(&self) -> &str {
        match self {
            Event::Started { name, .. } | Event::Succeeded { name, .. } | Event::Failed { name } => name,
        }
    }
}

pub struct ClientEntity {
    pub client: Client,
    pub events: Arc<Mutex<Vec<Event>>>,
}

pub enum Entity {
    Client(ClientEntity),
    Database(Database),
    Collection(Collection<Document>),
}

#[derive(Default)]
pub struct Entities {
    pub map: HashMap<String, Entity>,
    pub saved: crate::unified::matching::Saved,
}

/// Commands whose events drivers never publish (without `observeSensitiveCommands`).
const SENSITIVE: &[&str] = &[
    "authenticate",
    "saslstart",
    "saslcontinue",
    "getnonce",
    "createuser",
    "updateuser",
    "copydbgetnonce",
    "copydbsaslstart",
    "copydb",
    "hello",
    "ismaster",
];

impl Entities {
    pub async fn create(&mut self, list: &[Bson], router: &str) -> Result<(), String> {
        for e in list {
            let e = e.as_document().ok_or("entity is not a document")?;
            let (kind, spec) = e.iter().next().ok_or("empty entity")?;
            let spec = spec.as_document().ok_or("entity spec is not a document")?;
            let id = spec.get_str("id").map_err(|_| "entity without id")?.to_owned();
            let entity = match kind.as_str() {
                "client" => Entity::Client(client(spec, router).await?),
                "database" => {
                    let Entity::Client(c) = self.get(spec.get_str("client").unwrap_or_default())? else {
                        return Err("database on a non-client".into());
                    };
                    let name = spec.get_str("databaseName").map_err(|_| "databaseName")?;
                    let mut options: DatabaseOptions = options(spec, "databaseOptions")?;
                    options.selection_criteria = read_preference(spec, "databaseOptions")?;
                    Entity::Database(c.client.database_with_options(name, options))
                }
                "collection" => {
                    let Entity::Database(db) = self.get(spec.get_str("database").unwrap_or_default())? else {
                        return Err("collection on a non-database".into());
                    };
                    let name = spec.get_str("collectionName").map_err(|_| "collectionName")?;
                    let mut options: CollectionOptions = options(spec, "collectionOptions")?;
                    options.selection_criteria = read_preference(spec, "collectionOptions")?;
                    Entity::Collection(db.collection_with_options(name, options))
                }
                other => return Err(format!("entity type {other} not supported by the runner")),
            };
            self.map.insert(id, entity);
        }
        Ok(())
    }

    pub fn get(&self, id: &str) -> Result<&Entity, String> {
        self.map.get(id).ok_or_else(|| format!("no entity {id:?}"))
    }

    pub fn client(&self, id: &str) -> Result<&ClientEntity, String> {
        match self.get(id)? {
            Entity::Client(c) => Ok(c),
            _ => Err(format!("{id} is not a client")),
        }
    }
}

fn options<T: serde::de::DeserializeOwned + Default>(spec: &Document, key: &str) -> Result<T, String> {
    match spec.get_document(key) {
        Ok(d) => bson::deserialize_from_document(d.clone()).map_err(|e| format!("{key}: {e}")),
        Err(_) => Ok(T::default()),
    }
}

/// The driver's option structs call it `selectionCriteria`; the format says `readPreference`.
fn read_preference(spec: &Document, key: &str) -> Result<Option<mongodb::options::SelectionCriteria>, String> {
    match spec.get_document(key).ok().and_then(|o| o.get("readPreference")) {
        Some(rp) => {
            let rp: mongodb::options::ReadPreference =
                bson::deserialize_from_bson(rp.clone()).map_err(|e| format!("{key}.readPreference: {e}"))?;
            Ok(Some(mongodb::options::SelectionCriteria::ReadPreference(rp)))
        }
        None => Ok(None),
    }
}

async fn client(spec: &Document, router: &str) -> Result<ClientEntity, String> {
    // Not a direct connection: the driver discovers a sharded topology (a mongos), as against
    // MongoDB, and so sends `$readPreference` as it would there.
    let mut uri = format!("mongodb://{router}/?serverSelectionTimeoutMS=5000");
    if let Ok(opts) = spec.get_document("uriOptions") {
        for (k, v) in opts {
            let v = match v {
                Bson::String(s) => s.clone(),
                Bson::Boolean(b) => b.to_string(),
                Bson::Int32(i) => i.to_string(),
                Bson::Int64(i) => i.to_string(),
                other => return Err(format!("uriOption {k}: {other} not supported by the runner")),
            };
            uri.push_str(&format!("&{k}={v}"));
        }
    }
    let mut options = ClientOptions::parse(&uri).await.map_err(|e| format!("{uri}: {e}"))?;
    crate::security::authenticate(&mut options).await.map_err(|e| e.to_string())?;
    let observe: Vec<String> = spec
        .get_array("observeEvents")
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let ignore: Vec<String> = spec
        .get_array("ignoreCommandMonitoringEvents")
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_lowercase)).collect())
        .unwrap_or_default();
    let sensitive = spec.get_bool("observeSensitiveCommands").unwrap_or(false);
    let events = Arc::new(Mutex::new(Vec::new()));
    if !observe.is_empty() {
        let sink = Arc::clone(&events);
        options.command_event_handler = Some(EventHandler::callback(move |e: CommandEvent| {
            let (kind, event) = match e {
                CommandEvent::Started(s) => {
                    ("commandStartedEvent", Event::Started { name: s.command_name, db: s.db, command: s.command })
                }
                CommandEvent::Succeeded(s) => {
                    ("commandSucceededEvent", Event::Succeeded { name: s.command_name, reply: s.reply })
                }
                CommandEvent::Failed(f) => ("commandFailedEvent", Event::Failed { name: f.command_name }),
                _ => return,
            };
            let lower = event.name().to_lowercase();
            let hidden = (!sensitive && SENSITIVE.contains(&lower.as_str())) || lower == "configurefailpoint";
            if observe.iter().any(|o| o == kind) && !hidden && !ignore.contains(&lower) {
                sink.lock().expect("event sink").push(event);
            }
        }));
    }
    let client = Client::with_options(options).map_err(|e| e.to_string())?;
    Ok(ClientEntity { client, events })
}

/// A client with no monitoring, for the runner's own reads and writes.
pub async fn internal_client(router: &str) -> Result<Client, String> {
    Ok(client(&Document::new(), router).await?.client)
}
