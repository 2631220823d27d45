// Shared AAP 3.0 dealer logic for the Node upstream test peer.
//
// A port of ../aap_dealer.py (the Python peers use that one); keep the two in step.
// Serves the five AAP skills from the repository's demo data, validates every request
// against schemas/<stem>-request.schema.json and every answer against the matching
// response schema (or error.schema.json) before returning it, and appends accepted
// leads to a JSONL file. execute(skillId, request) returns either the typed response
// {"type": "<skill>.response", "data": {...}} or an aap.error payload.

import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const UPSTREAMS_DIR = path.resolve(HERE, '..');
export const REPO = path.resolve(UPSTREAMS_DIR, '..', '..');

export const SKILLS = JSON.parse(fs.readFileSync(path.join(UPSTREAMS_DIR, 'aap_skills.json'), 'utf8'));
export const SKILL_BY_ID = Object.fromEntries(SKILLS.skills.map((s) => [s.id, s]));
export const SKILL_BY_TOOL = Object.fromEntries(SKILLS.skills.map((s) => [s.tool, s]));
export const AAP_META_KEY = 'autoagentprotocol.org/aap';

const LISTED = ['available', 'intransit', 'pending'];
const TERM_FILTERS = [
  ['make', 'make'], ['model', 'model'], ['trim', 'trim'], ['condition', 'condition'],
  ['transmission', 'transmission'], ['fuel', 'fuel'], ['driveline', 'driveline'], ['body', 'body'],
  ['exterior_color', 'exterior_color'], ['interior_color', 'interior_color'], ['rooftops', 'rooftop'],
  ['status', 'status'],
];
const SCALAR_FILTERS = ['year_min', 'year_max', 'price_min', 'price_max', 'mileage_max', 'vin', 'stock', 'query', 'vehicle_type'];
const TERM_FACETS = [
  ['makes', 'make'], ['models', 'model'], ['trims', 'trim'], ['years', 'year'], ['conditions', 'condition'],
  ['transmissions', 'transmission'], ['fuels', 'fuel'], ['drivelines', 'driveline'], ['bodies', 'body'],
  ['exterior_colors', 'exterior_color'], ['interior_colors', 'interior_color'], ['rooftops', 'rooftop'],
  ['statuses', 'status'], ['vehicle_types', 'vehicle_type'],
];
const RANGE_FACETS = [['price_range', 'price'], ['mileage_range', 'mileage'], ['year_range', 'year']];
const SORT_FIELDS = ['price', 'list_price', 'msrp', 'mileage', 'year', 'make', 'model', 'stock', 'updated_at'];
const SEARCH_TEXT_FIELDS = ['year', 'make', 'model', 'trim', 'body', 'fuel', 'driveline', 'transmission', 'engine',
  'exterior_color', 'interior_color', 'condition', 'description', 'vehicle_type'];
const DEFAULT_LIMIT = 20;
const MAX_LIMIT = 100;

const clone = (v) => structuredClone(v);
export const nowRfc3339 = () => new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');

export function canonicalJson(v) {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

export function aapError(code, message, details, retryable) {
  const err = {
    type: 'aap.error',
    error_id: `err_${randomUUID().replaceAll('-', '')}`,
    code,
    message,
    retryable: retryable ?? ['RATE_LIMITED', 'INTERNAL_ERROR', 'UPSTREAM_UNAVAILABLE'].includes(code),
    created_at: nowRfc3339(),
  };
  if (details !== undefined) err.details = details;
  return err;
}

const fieldError = (instanceLocation, keyword, error, correction) =>
  correction ? { instanceLocation, keyword, error, correction } : { instanceLocation, keyword, error };

export const isError = (p) => p && typeof p === 'object' && p.type === 'aap.error';

export function capabilities() {
  const termKeys = TERM_FILTERS.map(([f]) => f);
  return {
    type: 'inventory.capabilities',
    filters: [...termKeys, ...SCALAR_FILTERS.filter((f) => !termKeys.includes(f))],
    sort_fields: SORT_FIELDS,
    facets: [...TERM_FACETS.map(([f]) => f), ...RANGE_FACETS.map(([f]) => f)],
    vehicle_types: ['car', 'motorcycle'],
    statuses: LISTED,
    conditions: ['new', 'used', 'cpo'],
    pagination: { default_limit: DEFAULT_LIMIT, max_limit: MAX_LIMIT, cursor: false },
  };
}

const isListed = (v) => LISTED.includes(v.status);
const isNum = (x) => typeof x === 'number' && Number.isFinite(x);

function strEqAny(value, wanted) {
  if (typeof value !== 'string') return false;
  const lv = value.toLowerCase();
  return wanted.some((w) => typeof w === 'string' && w.toLowerCase() === lv);
}

function searchableText(v) {
  const parts = [];
  for (const k of SEARCH_TEXT_FIELDS) {
    const x = v[k];
    if (typeof x === 'string' || isNum(x)) parts.push(String(x));
  }
  for (const f of v.features ?? []) if (typeof f === 'string') parts.push(f);
  return parts.join(' ').toLowerCase();
}

function matches(v, f) {
  if (!f) return true;
  for (const [key, field] of TERM_FILTERS) {
    if (Array.isArray(f[key]) && !strEqAny(v[field], f[key])) return false;
  }
  if (Array.isArray(f.vehicle_type) && !strEqAny(v.vehicle_type ?? 'car', f.vehicle_type)) return false;
  for (const [key, field, isMin] of [
    ['year_min', 'year', true], ['year_max', 'year', false], ['price_min', 'price', true],
    ['price_max', 'price', false], ['mileage_max', 'mileage', false],
  ]) {
    const bound = f[key];
    if (bound === undefined || bound === null) continue;
    const x = v[field];
    if (!isNum(x)) return false; // vehicles without the field never match a bound on it
    if (isMin && x < bound) return false;
    if (!isMin && x > bound) return false;
  }
  for (const key of ['vin', 'stock']) {
    if (f[key] !== undefined && v[key] !== f[key]) return false;
  }
  if (typeof f.query === 'string' && f.query.trim()) {
    const hay = searchableText(v);
    if (!f.query.split(/\s+/).filter(Boolean).every((t) => hay.includes(t.toLowerCase()))) return false;
  }
  return true;
}

function compareValues(a, b) {
  const rank = (x) => (isNum(x) ? 0 : typeof x === 'string' ? 1 : 3);
  const ra = rank(a);
  const rb = rank(b);
  if (ra !== rb) return ra - rb;
  if (ra === 0) return a - b;
  if (ra === 1) {
    const la = a.toLowerCase();
    const lb = b.toLowerCase();
    return la < lb ? -1 : la > lb ? 1 : 0;
  }
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  return ja < jb ? -1 : ja > jb ? 1 : 0;
}

function sortVehicles(list, sort) {
  const field = sort?.field ?? 'stock';
  const desc = sort?.order === 'desc';
  const has = (v) => v[field] !== undefined && v[field] !== null;
  return [...list].sort((a, b) => {
    let primary = 0;
    if (!has(a) && !has(b)) primary = 0;
    else if (!has(a)) primary = 1; // missing sorts last whatever the order
    else if (!has(b)) primary = -1;
    else primary = desc ? -compareValues(a[field], b[field]) : compareValues(a[field], b[field]);
    return primary || compareValues(a.stock ?? null, b.stock ?? null);
  });
}

class LeadLog {
  constructor(file) {
    this.file = file;
    this.byKey = new Map();
    this.count = 0;
    fs.mkdirSync(path.dirname(file), { recursive: true });
    if (fs.existsSync(file)) {
      for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
        if (!line.trim()) continue;
        let rec;
        try {
          rec = JSON.parse(line);
        } catch {
          continue; // a torn last line is skipped, never fatal
        }
        this.count += 1;
        if (typeof rec.idempotency_key === 'string') this.byKey.set(rec.idempotency_key, rec);
      }
    }
  }

  lookup(key) {
    return this.byKey.get(key);
  }

  append(record) {
    const fd = fs.openSync(this.file, 'a');
    try {
      fs.writeSync(fd, `${JSON.stringify(record)}\n`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    this.count += 1;
    this.byKey.set(record.idempotency_key, record);
  }
}

function parseTs(v) {
  if (typeof v !== 'string') return null;
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : t;
}

export class Dealer {
  constructor({ leads, dataDir, schemasDir, peer }) {
    dataDir = dataDir ?? path.join(REPO, 'data');
    schemasDir = schemasDir ?? path.join(REPO, 'schemas');
    this.dealer = JSON.parse(fs.readFileSync(path.join(dataDir, 'demo-dealer.json'), 'utf8'));
    this.vehicles = JSON.parse(fs.readFileSync(path.join(dataDir, 'demo-inventory.json'), 'utf8'));
    this.peer = peer ?? 'upstream';
    this.docs = {};
    this.validators = {};
    const ajv = new Ajv2020({ allErrors: true, strict: false });
    addFormats(ajv);
    for (const name of fs.readdirSync(schemasDir).sort()) {
      if (!name.endsWith('.schema.json')) continue;
      const stem = name.slice(0, -'.schema.json'.length);
      const doc = JSON.parse(fs.readFileSync(path.join(schemasDir, name), 'utf8'));
      this.docs[stem] = doc;
      this.validators[stem] = ajv.compile(doc);
    }
    this.leads = new LeadLog(leads);
  }

  schemaErrors(stem, instance) {
    const validate = this.validators[stem];
    if (validate(instance)) return [];
    return validate.errors.map((e) => {
      let error = e.message ?? e.keyword;
      if (e.keyword === 'additionalProperties' && e.params?.additionalProperty) {
        error = `${error} ('${e.params.additionalProperty}' was unexpected)`;
      }
      return fieldError(e.instancePath, e.keyword, error);
    });
  }

  outputSchema(skill) {
    const defs = {};
    const strip = (doc, name) => {
      const body = clone(doc);
      delete body.$schema;
      delete body.$id;
      for (const [k, v] of Object.entries(body.$defs ?? {})) defs[k] = v;
      delete body.$defs;
      defs[name] = body;
    };
    const responseName = `${skill.stem}-response`;
    strip(this.docs[responseName], responseName);
    strip(this.docs.error, 'aap-error');
    return {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: `${SKILLS.schema_base_url}${skill.stem}-result.schema.json`,
      type: 'object',
      description: `Either a ${skill.id}.response payload or an aap.error payload (then isError is true).`,
      anyOf: [{ $ref: `#/$defs/${responseName}` }, { $ref: '#/$defs/aap-error' }],
      $defs: defs,
    };
  }

  toolCatalog() {
    return SKILLS.skills.map((s) => {
      const annotations = s.read
        ? { title: s.title, readOnlyHint: true, openWorldHint: true }
        : { title: s.title, readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true };
      const aap = {
        version: SKILLS.aap_release,
        skill: s.id,
        request_type: `${s.id}.request`,
        response_type: `${s.id}.response`,
        request_schema: `${SKILLS.schema_base_url}${s.stem}-request.schema.json`,
        response_schema: `${SKILLS.schema_base_url}${s.stem}-response.schema.json`,
        error_schema: `${SKILLS.schema_base_url}error.schema.json`,
      };
      if (s.id === 'inventory.search') aap.capabilities = capabilities();
      return {
        name: s.tool,
        title: s.title,
        description: s.description,
        inputSchema: clone(this.docs[`${s.stem}-request`]),
        outputSchema: this.outputSchema(s),
        annotations,
        _meta: { [AAP_META_KEY]: aap },
      };
    });
  }

  dealerName() {
    return String(this.dealer.name ?? 'Dealer');
  }

  dealerPhone() {
    for (const r of this.dealer.rooftops ?? []) {
      for (const p of r.phones ?? []) if (typeof p.value === 'string') return p.value;
    }
    return null;
  }

  filtered(filters) {
    return this.vehicles.filter((v) => isListed(v) && matches(v, filters));
  }

  execute(skillId, request, caller) {
    const skill = SKILL_BY_ID[skillId];
    if (!skill) return aapError('UNSUPPORTED_SKILL', `This dealer does not implement the skill '${skillId}'.`);
    const expected = `${skillId}.request`;
    if (request && typeof request === 'object' && !Array.isArray(request) && request.type !== expected) {
      return aapError('SCHEMA_VALIDATION_FAILED', `The payload type does not match the skill ${skillId}.`, {
        errors: [fieldError('/type', 'const', `must be ${expected}`, `send type '${expected}' for ${skill.tool}`)],
      });
    }
    const errors = this.schemaErrors(`${skill.stem}-request`, request);
    if (errors.length) {
      return aapError('SCHEMA_VALIDATION_FAILED', `The ${skillId} request failed validation with ${errors.length} error(s).`, { errors });
    }
    let result;
    try {
      switch (skillId) {
        case 'dealer.information':
          result = { type: 'dealer.information.response', data: clone(this.dealer) };
          break;
        case 'inventory.facets':
          result = this.facets(request);
          break;
        case 'inventory.search':
          result = this.search(request);
          break;
        case 'inventory.vehicle':
          result = this.vehicle(request);
          break;
        default:
          result = this.lead(request, caller);
      }
    } catch (e) {
      console.error(`skill ${skillId} failed`, e);
      return aapError('INTERNAL_ERROR', 'The dealer system failed to process the request.');
    }
    const stem = isError(result) ? 'error' : `${skill.stem}-response`;
    const outErrors = this.schemaErrors(stem, result);
    if (outErrors.length) {
      console.error(`answer for ${skillId} fails ${stem}.schema.json`, JSON.stringify(outErrors));
      return aapError('INTERNAL_ERROR', 'The dealer system produced an invalid answer.');
    }
    return result;
  }

  search(req) {
    const pagination = req.pagination ?? {};
    if ('cursor' in pagination) {
      return aapError('INVALID_CURSOR', 'This dealer does not issue pagination cursors; use pagination.skip and pagination.limit.', {
        errors: [fieldError('/pagination/cursor', 'cursor', 'cursors are not supported by this dealer', 'drop pagination.cursor and page with pagination.skip')],
      });
    }
    const found = sortVehicles(this.filtered(req.filters), req.sort);
    const skip = pagination.skip ?? 0;
    const limit = Math.max(1, Math.min(pagination.limit ?? DEFAULT_LIMIT, MAX_LIMIT));
    return {
      type: 'inventory.search.response',
      data: { total: found.length, vehicles: found.slice(skip, skip + limit).map(clone), skip, limit },
    };
  }

  facets(req) {
    const found = this.filtered(req.filters);
    const data = {};
    for (const [facet, field] of TERM_FACETS) {
      const counts = new Map();
      for (const v of found) {
        let value = v[field];
        if (field === 'vehicle_type' && value === undefined) value = 'car';
        if (!(typeof value === 'string' || Number.isInteger(value))) continue;
        const key = JSON.stringify(value);
        if (!counts.has(key)) counts.set(key, [value, 0]);
        counts.get(key)[1] += 1;
      }
      const items = [...counts.values()].sort((a, b) => b[1] - a[1] || (JSON.stringify(a[0]) < JSON.stringify(b[0]) ? -1 : 1));
      data[facet] = items.map(([value, count]) => ({ value, count }));
    }
    for (const [facet, field] of RANGE_FACETS) {
      const nums = found.map((v) => v[field]).filter((x) => Number.isInteger(x));
      if (nums.length) data[facet] = { min: Math.min(...nums), max: Math.max(...nums) };
    }
    return { type: 'inventory.facets.response', data };
  }

  vehicle(req) {
    const ids = ['vin', 'stock', 'vehicle_id'].filter((k) => typeof req[k] === 'string').map((k) => [k, req[k]]);
    const first = ids.length ? ids[0][0] : 'vin';
    const found = ids.length ? this.vehicles.find((v) => ids.every(([k, want]) => v[k] === want)) : undefined;
    if (!found) {
      return aapError('VEHICLE_NOT_FOUND', "No vehicle in this dealer's inventory matches the identifiers sent.", {
        errors: [fieldError(`/${first}`, 'inventory', 'no listing matches', 'search inventory with aap_inventory_search and use a vin, stock or vehicle_id it returns')],
      });
    }
    if (!isListed(found)) {
      return aapError('VEHICLE_UNAVAILABLE', 'This vehicle is no longer available.', {
        errors: [fieldError(`/${first}`, 'status', 'the vehicle has left inventory', 'search for similar vehicles with aap_inventory_search')],
      });
    }
    return { type: 'inventory.vehicle.response', data: clone(found) };
  }

  lead(req, caller) {
    const key = req.idempotency_key;
    const fingerprint = createHash('sha256').update(canonicalJson(req)).digest('hex');
    const previous = this.leads.lookup(key);
    if (previous) {
      if (previous.fingerprint !== fingerprint) {
        return aapError('IDEMPOTENCY_CONFLICT', 'This idempotency_key was already used for a different lead.', {
          errors: [fieldError('/idempotency_key', 'idempotency', 'key reused with a different payload', 'use a new idempotency_key for a new lead; reuse a key only to retry the identical request')],
        });
      }
      return clone(previous.response);
    }
    const consent = req.consent;
    const now = Date.now();
    const expires = parseTs(consent.expires_at);
    if (expires !== null && expires <= now) {
      return aapError('INVALID_CONSENT', 'The contact consent has expired; no lead was recorded.', {
        errors: [fieldError('/consent/expires_at', 'consent', 'consent expired', 'ask the buyer for consent again and send a fresh ConsentGrant')],
      });
    }
    const granted = parseTs(consent.granted_at);
    if (granted !== null && granted > now + 5 * 60 * 1000) {
      return aapError('INVALID_CONSENT', 'The consent grant time lies in the future; no lead was recorded.', {
        errors: [fieldError('/consent/granted_at', 'consent', 'granted_at is in the future', 'send the time the buyer actually granted consent')],
      });
    }
    const preferred = req.customer.preferred_contact;
    const allowed = consent.allowed_channels ?? [];
    if (['email', 'phone', 'sms'].includes(preferred) && !allowed.includes(preferred)) {
      return aapError('CONTACT_CONSENT_REQUIRED', "The preferred contact channel is not covered by the buyer's consent; no lead was recorded.", {
        errors: [fieldError('/customer/preferred_contact', 'consent', 'channel not in consent.allowed_channels', 'choose a granted channel or obtain consent for this one')],
      });
    }
    const voi = req.vehicle_of_interest;
    if (voi && typeof voi === 'object') {
      let unit;
      for (const k of ['vin', 'stock', 'vehicle_id']) {
        if (typeof voi[k] === 'string') {
          unit = this.vehicles.find((v) => v[k] === voi[k]);
          if (unit) break;
        }
      }
      if (unit && !isListed(unit)) {
        return aapError('VEHICLE_UNAVAILABLE', 'The vehicle of interest is no longer available; no lead was recorded.', {
          errors: [fieldError('/vehicle_of_interest', 'status', 'the vehicle has left inventory', 'choose an available vehicle from aap_inventory_search, or omit vehicle_of_interest')],
        });
      }
    }
    const leadId = `lead_${randomUUID().replaceAll('-', '')}`;
    const data = { lead_id: leadId, status: 'received' };
    if (req.appointment !== undefined && req.appointment !== null) {
      data.appointment = { appointment_id: `appt_${randomUUID().replaceAll('-', '')}`, status: 'requested' };
    }
    const dealer = { name: this.dealerName() };
    const phone = this.dealerPhone();
    if (phone) dealer.phone = phone;
    data.dealer = dealer;
    const response = {
      type: 'lead.submit.response',
      data,
      message: `${this.dealerName()} received this inquiry. A sales advisor will follow up only through the channels the buyer allowed.`,
    };
    this.leads.append({
      lead_id: leadId,
      received_at: nowRfc3339(),
      peer: this.peer,
      caller: caller ?? null,
      idempotency_key: key,
      fingerprint,
      request: req,
      response,
    });
    return response;
  }
}
